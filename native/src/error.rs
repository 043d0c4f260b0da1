//! The one error type of the native core.
//!
//! Capability modules return `Result<T, Error>`. Each [`ErrorKind`] maps to exactly one gRPC status
//! code ([`ErrorKind::grpc_code`], the one table of that mapping): the parse multiplexer writes it
//! into a failed request's `RequestDelta.error`, and the `ffi` module exports the table
//! (`sc_error_kinds`) so Python raises the matching status for a failed call. The kind is therefore
//! part of the contract: it decides what a router sees (`INVALID_ARGUMENT` versus `INTERNAL`), so
//! pick it for the caller, not for the code that failed.

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
    /// The caller withdrew the call (its client went away) before the work finished.
    Cancelled,
    /// A bug: an invariant of ours did not hold.
    Internal,
}

/// gRPC status code numbers (`google.rpc.Code`) of the statuses the native core produces.
/// (`pub(crate)`: cbindgen would otherwise put every `pub const` of the crate into the C header.)
pub mod grpc_code {
    /// `CANCELLED`.
    pub(crate) const CANCELLED: i32 = 1;
    /// `INVALID_ARGUMENT`.
    pub(crate) const INVALID_ARGUMENT: i32 = 3;
    /// `DEADLINE_EXCEEDED`.
    pub(crate) const DEADLINE_EXCEEDED: i32 = 4;
    /// `NOT_FOUND`.
    pub(crate) const NOT_FOUND: i32 = 5;
    /// `RESOURCE_EXHAUSTED`.
    pub(crate) const RESOURCE_EXHAUSTED: i32 = 8;
    /// `FAILED_PRECONDITION`.
    pub(crate) const FAILED_PRECONDITION: i32 = 9;
    /// `INTERNAL`.
    pub(crate) const INTERNAL: i32 = 13;
}

impl ErrorKind {
    /// Every kind (a new kind fails to compile in the matches below until it is mapped; list it
    /// here too, the table tests walk this list).
    pub const ALL: [ErrorKind; 7] = [
        ErrorKind::InvalidArgument,
        ErrorKind::NotFound,
        ErrorKind::ResourceExhausted,
        ErrorKind::FailedPrecondition,
        ErrorKind::DeadlineExceeded,
        ErrorKind::Cancelled,
        ErrorKind::Internal,
    ];

    /// The gRPC status code a caller sees for this kind: the one table of that mapping.
    pub fn grpc_code(self) -> i32 {
        match self {
            ErrorKind::InvalidArgument => grpc_code::INVALID_ARGUMENT,
            ErrorKind::NotFound => grpc_code::NOT_FOUND,
            ErrorKind::ResourceExhausted => grpc_code::RESOURCE_EXHAUSTED,
            ErrorKind::FailedPrecondition => grpc_code::FAILED_PRECONDITION,
            ErrorKind::DeadlineExceeded => grpc_code::DEADLINE_EXCEEDED,
            ErrorKind::Cancelled => grpc_code::CANCELLED,
            ErrorKind::Internal => grpc_code::INTERNAL,
        }
    }

    /// The kind's name in snake case (`invalid_argument`), as the exported table spells it.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "invalid_argument",
            ErrorKind::NotFound => "not_found",
            ErrorKind::ResourceExhausted => "resource_exhausted",
            ErrorKind::FailedPrecondition => "failed_precondition",
            ErrorKind::DeadlineExceeded => "deadline_exceeded",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Internal => "internal",
        }
    }

    /// Short lowercase description, used as the message prefix.
    pub fn describe(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "invalid argument",
            ErrorKind::NotFound => "not found",
            ErrorKind::ResourceExhausted => "resource exhausted",
            ErrorKind::FailedPrecondition => "failed precondition",
            ErrorKind::DeadlineExceeded => "deadline exceeded",
            ErrorKind::Cancelled => "cancelled",
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

    /// Shorthand for [`ErrorKind::DeadlineExceeded`].
    pub fn deadline_exceeded(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::DeadlineExceeded, message)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_maps_to_one_distinct_grpc_status() {
        let mut codes: Vec<i32> = ErrorKind::ALL.iter().map(|k| k.grpc_code()).collect();
        let known = [
            grpc_code::INVALID_ARGUMENT,
            grpc_code::DEADLINE_EXCEEDED,
            grpc_code::CANCELLED,
            grpc_code::NOT_FOUND,
            grpc_code::RESOURCE_EXHAUSTED,
            grpc_code::FAILED_PRECONDITION,
            grpc_code::INTERNAL,
        ];
        for kind in ErrorKind::ALL {
            assert!(known.contains(&kind.grpc_code()), "{kind:?}");
            assert_ne!(kind.grpc_code(), 0, "{kind:?} maps to OK");
        }
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(
            codes.len(),
            ErrorKind::ALL.len(),
            "two kinds share a status"
        );
    }

    #[test]
    fn the_table_has_the_contract_numbers() {
        // google.rpc.Code, as the proto's `Status.code` documents them.
        let table: Vec<(&str, i32)> = ErrorKind::ALL
            .iter()
            .map(|k| (k.name(), k.grpc_code()))
            .collect();
        assert_eq!(
            table,
            [
                ("invalid_argument", 3),
                ("not_found", 5),
                ("resource_exhausted", 8),
                ("failed_precondition", 9),
                ("deadline_exceeded", 4),
                ("cancelled", 1),
                ("internal", 13),
            ]
        );
    }
}
