//! What a configuration can go wrong with: [`ConfigError`] (torch 2.15 rejects the string, with
//! torch's own exception type and text and cachalot's explanation) and [`Warning`] (accepted,
//! but probably not what was meant). `Fault` is the C++ exception torch throws.

use std::fmt;

use super::keys::NumError;

/// The header torch's tokenizer assertions name.
pub(super) const HEADER: &str = "/__w/pytorch/pytorch/c10/core/AllocatorConfig.h";

/// What torch 2.15 throws.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Fault {
    /// `TORCH_INTERNAL_ASSERT` → `c10::Error`.
    Assert {
        cond: &'static str,
        file: &'static str,
        line: u32,
        msg: String,
    },
    /// `TORCH_CHECK_VALUE` → `c10::ValueError`.
    Value(String),
    /// `std::invalid_argument` from `std::stoull` / `std::stod` (what() = the function name).
    InvalidArgument(&'static str),
    /// `std::out_of_range` from the same.
    OutOfRange(&'static str),
}

impl Fault {
    pub(super) fn out_of_bounds(line: u32) -> Fault {
        let msg = "Index out of bounds in ConfigTokenizer".into();
        Fault::Assert {
            cond: "i < config_.size()",
            file: HEADER,
            line,
            msg,
        }
    }

    pub(super) fn unclosed(cond: &'static str, file: &'static str, line: u32) -> Fault {
        let msg = "Expected closing bracket ']' in ConfigTokenizer but reached end of config";
        Fault::Assert {
            cond,
            file,
            line,
            msg: msg.into(),
        }
    }

    pub(super) fn number(e: NumError, function: &'static str) -> Fault {
        match e {
            NumError::Invalid => Fault::InvalidArgument(function),
            NumError::OutOfRange => Fault::OutOfRange(function),
        }
    }
}

/// A configuration string torch 2.15 would reject (or, for cachalot's own checks, an
/// inconsistent `CACHALOT_ALLOC_CONF`). `Display` quotes the entry and says what is valid.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("error in {var} entry '{entry}': {reason}")]
pub struct ConfigError {
    /// The variable the string came from (`PYTORCH_CUDA_ALLOC_CONF` for [`super::parse_pytorch`]).
    pub var: &'static str,
    /// The offending entry as written (`max_split_size_mb:10`).
    pub entry: String,
    /// What is wrong, and what would be valid.
    pub reason: String,
    pub(super) fault: Box<Fault>,
    pub(super) at_load: bool,
}

impl ConfigError {
    /// The exact text torch 2.15 raises for this string (what the oracle prints on stderr),
    /// e.g. `Unrecognized key 'no_such_key' in CUDA allocator config.`.
    pub fn torch_message(&self) -> String {
        match self.fault.as_ref() {
            Fault::Assert {
                cond,
                file,
                line,
                msg,
            } => format!(
                "{cond} INTERNAL ASSERT FAILED at \"{file}\":{line}, please report a bug to \
                 PyTorch. {msg}"
            ),
            Fault::Value(m) => m.clone(),
            Fault::InvalidArgument(f) | Fault::OutOfRange(f) => (*f).to_string(),
        }
    }

    /// The C++ exception type torch 2.15 throws (`c10::ValueError`, `c10::Error`,
    /// `std::invalid_argument` or `std::out_of_range`).
    pub fn torch_exception(&self) -> &'static str {
        match *self.fault {
            Fault::Assert { .. } => "c10::Error",
            Fault::Value(_) => "c10::ValueError",
            Fault::InvalidArgument(_) => "std::invalid_argument",
            Fault::OutOfRange(_) => "std::out_of_range",
        }
    }

    /// True when torch fails while `libc10_cuda.so` loads (its backend scan): the process is
    /// aborted (`terminate called ...`) instead of raising a Python exception.
    pub fn aborts_at_load(&self) -> bool {
        self.at_load
    }
}

/// Something torch 2.15 accepts but that is probably not what was meant, or that torch itself
/// warns about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// The variable the entry came from.
    pub var: &'static str,
    /// The entry as written (may be empty for whole-configuration remarks).
    pub entry: String,
    /// How the entry was read, and what to write instead.
    pub message: String,
    /// The warning torch 2.15 itself prints, if it prints one.
    pub torch_text: Option<String>,
}

impl Warning {
    pub(super) fn new(
        var: &'static str,
        entry: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Warning {
            var,
            entry: entry.into(),
            message: message.into(),
            torch_text: None,
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.entry.as_str() {
            "" => write!(f, "{}: {}", self.var, self.message),
            e => write!(f, "{} entry '{e}': {}", self.var, self.message),
        }
    }
}
