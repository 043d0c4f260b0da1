//! The one error type of the native core.
//!
//! Capability modules return `Result<T, Error>`; the `ffi` module turns an `Error` into a status code
//! plus an error kind and message, and Python maps each kind to one gRPC status code. The kind is
//! therefore part of the contract: it decides what a router sees (`INVALID_ARGUMENT` versus
//! `INTERNAL`), so pick it for the caller, not for the code that failed.

use std::fmt;

/// What kind of failure an [`Error`] is; each kind maps to one gRPC status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The caller passed something malformed (bad UTF-8, an id outside the vocabulary, bad JSON);
    /// the message names the field.
    InvalidArgument,
    /// Something named by the caller does not exist (a file, a template name).
    NotFound,
    /// A limit was hit (output size, template fuel, open streams).
    ResourceExhausted,
    /// The object cannot do what was asked in its current state (no chat template, unsupported
    /// tokenizer format, a finished stream).
    FailedPrecondition,
    /// The caller's deadline passed before the work finished.
    DeadlineExceeded,
    /// A bug: an invariant of ours did not hold.
    Internal,
}

impl ErrorKind {
    /// Short lowercase description, used as the message prefix.
    pub fn describe(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "invalid argument",
            ErrorKind::NotFound => "not found",
            ErrorKind::ResourceExhausted => "resource exhausted",
            ErrorKind::FailedPrecondition => "failed precondition",
            ErrorKind::DeadlineExceeded => "deadline exceeded",
            ErrorKind::Internal => "internal error",
        }
    }
}

/// An error with a kind and a human-readable message that names the offending field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }

    /// Shorthand for [`ErrorKind::InvalidArgument`].
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }

    /// Shorthand for [`ErrorKind::NotFound`].
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    /// Shorthand for [`ErrorKind::FailedPrecondition`].
    pub fn failed_precondition(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::FailedPrecondition, message)
    }

    /// Shorthand for [`ErrorKind::ResourceExhausted`].
    pub fn resource_exhausted(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::ResourceExhausted, message)
    }

    /// Shorthand for [`ErrorKind::Internal`].
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    /// The kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, without the kind prefix.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Prefixes the message with context (`"texts[3]: "`), keeping the kind.
    pub fn context(mut self, prefix: impl fmt::Display) -> Self {
        self.message = format!("{prefix}: {}", self.message);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.describe(), self.message)
    }
}

impl std::error::Error for Error {}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
