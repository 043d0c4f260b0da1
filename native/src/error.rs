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

/// How many characters of a value from the client a message repeats (see [`quoted`]); the Python
/// side cuts at the same length (`router_adapter.errors.QUOTED_CHARS`).
pub(crate) const QUOTED_CHARS: usize = 200;

/// The longest message an [`Error`] carries, in UTF-8 bytes; a longer one is cut (see
/// [`Error::new`]). Python bounds its own messages alike (`sidecar.errors.MAX_MESSAGE_BYTES`).
pub(crate) const MAX_MESSAGE_BYTES: usize = 4096;

/// What is kept of a message cut to [`MAX_MESSAGE_BYTES`], leaving room for the note saying so.
const CUT_MESSAGE_BYTES: usize = 4000;

/// `text` (a value from the client) as a message shows it: `quote` of its first [`QUOTED_CHARS`]
/// characters, then how long it is when it is longer (`'mmm'... (30000000 characters)`). Messages
/// that quoted whole values made a 16.5 KB model name pass gRPC's 16 KiB metadata limit (the
/// client got RESOURCE_EXHAUSTED "Stream removed" instead of the error naming the field) and a
/// 30 MB one write 180 MB of log; `quote` is the message's own style (`py_repr`, `{:?}`, ...).
pub(crate) fn quoted(text: &str, quote: impl Fn(&str) -> String) -> String {
    match text.char_indices().nth(QUOTED_CHARS) {
        None => quote(text),
        Some((cut, _)) => format!(
            "{}... ({} characters)",
            quote(&text[..cut]),
            text.chars().count()
        ),
    }
}

/// `message` within [`MAX_MESSAGE_BYTES`]: values from the client are cut where they are quoted
/// ([`quoted`]), but a message can still carry text nobody bounded (what a chat template raises,
/// a request template's own error); the status would then not reach the client.
fn bounded(mut message: String) -> String {
    if message.len() > MAX_MESSAGE_BYTES {
        let total = message.len();
        let mut cut = CUT_MESSAGE_BYTES;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push_str(&format!("... (message cut: {total} bytes)"));
    }
    message
}

/// An error with a kind and a human-readable message that names the offending field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    /// An error of `kind` with `message` (cut to [`MAX_MESSAGE_BYTES`]).
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: bounded(message.into()),
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
        self.message = bounded(format!("{prefix}: {}", self.message));
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

    /// The same strings `tests/server/test_errors.py` cuts in Python.
    #[test]
    fn messages_are_cut_at_a_character_boundary_saying_so() {
        let cases = [
            ("short".to_string(), "short".to_string()),
            ("x".repeat(4096), "x".repeat(4096)),
            (
                "x".repeat(4097),
                format!("{}... (message cut: 4097 bytes)", "x".repeat(4000)),
            ),
            (
                format!("{}{}", "x".repeat(3999), "é".repeat(100)),
                format!("{}... (message cut: 4199 bytes)", "x".repeat(3999)),
            ),
        ];
        for (message, expected) in cases {
            let error = Error::invalid_argument(message);
            assert_eq!(error.message(), expected);
            assert_eq!(bounded(expected.clone()), expected);
        }
        let long = Error::internal("y".repeat(4090)).context("texts[3]");
        assert!(long.message().ends_with("... (message cut: 4100 bytes)"));
    }

    #[test]
    fn a_quoted_value_keeps_its_first_characters_and_says_how_long_it_was() {
        let debug = |s: &str| format!("{s:?}");
        assert_eq!(quoted("qwen", debug), "\"qwen\"");
        let at_bound = "é".repeat(QUOTED_CHARS);
        assert_eq!(quoted(&at_bound, debug), format!("\"{at_bound}\""));
        assert_eq!(
            quoted(&"é".repeat(QUOTED_CHARS + 1), debug),
            format!("\"{at_bound}\"... (201 characters)")
        );
    }
}
