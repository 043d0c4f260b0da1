//! Where the sidecar listens, parsed from the strings routers are configured with.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use tonic::transport::Endpoint;

use crate::error::Error;

/// A sidecar address: a Unix socket or a TCP (plaintext HTTP/2) endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `unix:PATH` or `unix://ABSOLUTE_PATH`, gRPC's spelling (the server prints `unix:/tmp/sidecar.sock`).
    Unix(PathBuf),
    /// `host:port`, `[v6]:port`, `http://host:port` or gRPC's `dns:///host:port`; kept as an
    /// `http://` URI.
    Tcp(String),
}

impl FromStr for Target {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self, Error> {
        let invalid = |why: &str| Error::InvalidTarget(format!("target {text:?}: {why}"));
        if let Some(rest) = text.strip_prefix("unix:") {
            // `unix:///abs` and `unix:/abs` name the same socket; `unix:rel` is relative.
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if path.is_empty() {
                return Err(invalid("empty socket path"));
            }
            return Ok(Target::Unix(PathBuf::from(path)));
        }
        if text.starts_with("https://") {
            return Err(invalid(
                "TLS is not supported by this client yet (use the server's plaintext loopback or Unix-socket listener)",
            ));
        }
        // gRPC's name syntax: `dns:[//authority/]host:port`; a DNS server (authority) is not
        // supported, the system resolver is used.
        let address = match text.strip_prefix("dns:") {
            Some(rest) if rest.starts_with("//") => rest
                .strip_prefix("///")
                .ok_or_else(|| invalid("a DNS authority is not supported: use dns:///host:port"))?,
            Some(rest) => rest,
            None => text.strip_prefix("http://").unwrap_or(text),
        };
        if let Some((scheme, _)) = address.split_once("://") {
            return Err(invalid(&format!(
                "scheme {scheme:?} is not supported (unix:PATH, host:port, http://host:port or \
                 dns:///host:port)"
            )));
        }
        let uri = format!("http://{address}");
        let port = address.rsplit_once(':').and_then(|(host, port)| {
            let digits = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
            (!host.is_empty() && digits).then_some(port)
        });
        let Some(port) = port else {
            return Err(invalid("expected unix:PATH, host:port or http://host:port"));
        };
        if !matches!(port.parse::<u16>(), Ok(p) if p > 0) {
            return Err(invalid(&format!("port {port} is not in 1..=65535")));
        }
        uri.parse::<tonic::codegen::http::Uri>()
            .map_err(|e| invalid(&e.to_string()))?;
        Ok(Target::Tcp(uri))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Unix(path) => write!(f, "unix:{}", path.display()),
            Target::Tcp(uri) => f.write_str(uri),
        }
    }
}

impl Target {
    /// A tonic endpoint for this target (tonic dials `unix:` paths itself).
    pub(crate) fn endpoint(&self) -> Result<Endpoint, Error> {
        let spelled = match self {
            Target::Unix(path) => format!("unix:{}", path.display()),
            Target::Tcp(uri) => uri.clone(),
        };
        Endpoint::from_shared(spelled).map_err(|e| Error::InvalidTarget(format!("{self}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Target, Error> {
        text.parse()
    }

    #[test]
    fn unix_spellings() {
        assert_eq!(
            parse("unix:/tmp/s.sock").unwrap(),
            Target::Unix("/tmp/s.sock".into())
        );
        assert_eq!(
            parse("unix:///tmp/s.sock").unwrap(),
            Target::Unix("/tmp/s.sock".into())
        );
        assert_eq!(
            parse("unix:rel.sock").unwrap(),
            Target::Unix("rel.sock".into())
        );
        assert!(parse("unix:").is_err());
    }

    #[test]
    fn tcp_spellings() {
        assert_eq!(
            parse("127.0.0.1:50051").unwrap(),
            Target::Tcp("http://127.0.0.1:50051".into())
        );
        assert_eq!(
            parse("http://localhost:9").unwrap(),
            Target::Tcp("http://localhost:9".into())
        );
        assert_eq!(
            parse("[::1]:50051").unwrap(),
            Target::Tcp("http://[::1]:50051".into())
        );
        assert_eq!(
            parse("dns:///localhost:50051").unwrap(),
            Target::Tcp("http://localhost:50051".into())
        );
        assert_eq!(
            parse("dns:127.0.0.1:9").unwrap(),
            Target::Tcp("http://127.0.0.1:9".into())
        );
        assert!(parse("localhost").is_err());
        assert!(parse("https://x:1").is_err());
        assert!(parse(":50051").is_err());
    }

    #[test]
    fn out_of_range_ports_and_other_schemes_are_refused() {
        for text in [
            "127.0.0.1:99999",
            "http://127.0.0.1:99999",
            "localhost:0",
            "dns://8.8.8.8/localhost:50051",
            "grpc://localhost:50051",
            "http://dns:///localhost:50051",
        ] {
            let error = parse(text).unwrap_err();
            assert!(matches!(error, Error::InvalidTarget(_)), "{text}: {error}");
            assert!(error.message().contains(text), "{error}");
        }
    }

    #[test]
    fn display_round_trips() {
        for text in ["unix:/tmp/s.sock", "http://127.0.0.1:1"] {
            assert_eq!(parse(text).unwrap().to_string(), text);
        }
    }
}
