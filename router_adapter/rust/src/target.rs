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
    /// `host:port`, `[v6]:port` or `http://host:port`; kept as an `http://` URI.
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
                "TLS is not supported (the sidecar serves plaintext on loopback or a Unix socket)",
            ));
        }
        let uri = if text.starts_with("http://") {
            text.to_string()
        } else {
            format!("http://{text}")
        };
        let authority = &uri["http://".len()..];
        let has_port = authority.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
        });
        if !has_port {
            return Err(invalid("expected unix:PATH, host:port or http://host:port"));
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
        assert!(parse("localhost").is_err());
        assert!(parse("https://x:1").is_err());
        assert!(parse(":50051").is_err());
    }

    #[test]
    fn display_round_trips() {
        for text in ["unix:/tmp/s.sock", "http://127.0.0.1:1"] {
            assert_eq!(parse(text).unwrap().to_string(), text);
        }
    }
}
