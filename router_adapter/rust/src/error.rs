//! The one error type of every call: a gRPC status (code and message, as the server or the
//! transport gave it), or a target string that could not be understood.

use std::fmt;

use tonic::{Code, Status};

/// Why a call failed.
#[derive(Debug, Clone)]
pub enum Error {
    /// A gRPC status. The server's own errors (INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED,
    /// FAILED_PRECONDITION, ...) arrive exactly as it sent them; the client adds UNAVAILABLE (no
    /// connection, failed health check) and DEADLINE_EXCEEDED (the call's deadline passed).
    Status(Status),
    /// The target is neither `unix:PATH`, `host:port`, `http://host:port` nor `dns:///host:port`,
    /// or its port is not in 1..=65535.
    InvalidTarget(String),
}

impl Error {
    /// The gRPC status code; `InvalidTarget` counts as INVALID_ARGUMENT.
    pub fn code(&self) -> Code {
        match self {
            Error::Status(status) => status.code(),
            Error::InvalidTarget(_) => Code::InvalidArgument,
        }
    }

    /// The status message (for the server's errors it names the offending field).
    pub fn message(&self) -> &str {
        match self {
            Error::Status(status) => status.message(),
            Error::InvalidTarget(message) => message,
        }
    }

    /// The request id the server echoed with its error (`x-request-id` of the status's
    /// metadata): the caller's own (see [`crate::Client::with_request_id`]) or the one the
    /// server made, under which it logged the call. None for errors the server did not send
    /// (no connection, the client's deadline, a request over the client's limit) and for calls
    /// it refused before running them (an RPC it does not serve: UNIMPLEMENTED).
    pub fn request_id(&self) -> Option<&str> {
        crate::metadata::request_id(self.status()?.metadata())
    }

    /// The status, when there is one.
    pub fn status(&self) -> Option<&Status> {
        match self {
            Error::Status(status) => Some(status),
            Error::InvalidTarget(_) => None,
        }
    }
}

impl From<Status> for Error {
    fn from(status: Status) -> Self {
        Error::Status(status)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", code_name(self.code()), self.message())
    }
}

impl std::error::Error for Error {}

/// The canonical upper-case name of a code (`NOT_FOUND`), as gRPC documents and other languages
/// print it.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_code_and_keeps_the_message() {
        let error = Error::from(Status::not_found("model: unknown model 'x'"));
        assert_eq!(error.to_string(), "NOT_FOUND: model: unknown model 'x'");
        assert_eq!(error.code(), Code::NotFound);
        assert_eq!(
            Error::InvalidTarget("bad".into()).code(),
            Code::InvalidArgument
        );
    }
}
