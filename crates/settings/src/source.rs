//! Where a setting's value comes from, and the error that says so: a key of
//! the TOML file (with the file's path) or an environment variable.
//!
//! Every stage of a load reads the environment through [`Env`] and makes
//! its errors through [`Blame`], so an error always names the setting at
//! fault and where it came from.

use std::fmt;
use std::path::{Path, PathBuf};

/// A setting that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}`{setting}`: {message}")]
pub struct SettingsError {
    /// The setting's name: an environment variable or a TOML path.
    pub setting: String,
    pub message: String,
    origin: Origin,
}

/// A setting's name and what is wrong with it, from code that does not
/// know which file the setting was read from ([`Blame::field`] adds that).
pub(super) type FieldError = (String, String);

/// The environment as the settings see it. A variable set to nothing but
/// white space counts as unset.
pub(super) struct Env<'a>(&'a dyn Fn(&str) -> Option<String>);

/// Makes the errors of one load: those about a setting of the file name
/// the file, those about a variable say it is one of the environment.
#[derive(Debug, Clone)]
pub(super) struct Blame {
    file: Origin,
}

/// Where a value was taken from, for a setting that the environment can
/// override (`AI_DEFAULT_PROVIDER` over `routing.default`, say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    /// A key of the file, as its TOML path.
    File(&'static str),
    /// An environment variable.
    Env(&'static str),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Origin {
    Env,
    File(PathBuf),
    None,
}

// === impl SettingsError ===

impl SettingsError {
    /// An error about a setting that comes from neither the file nor the
    /// environment (the configuration file that cannot be read).
    pub(super) fn unplaced(setting: &str, message: String) -> Self {
        Self {
            setting: setting.to_owned(),
            message,
            origin: Origin::None,
        }
    }
}

// === impl Env ===

impl<'a> Env<'a> {
    pub(super) fn new(lookup: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Self(lookup)
    }

    /// The variable's value, unless it is unset or blank.
    pub(super) fn get(&self, name: &str) -> Option<String> {
        (self.0)(name).filter(|v| !v.trim().is_empty())
    }
}

// === impl Blame ===

impl Blame {
    /// The errors of settings read from the file at `path`, or of defaults
    /// when there is no file.
    pub(super) fn new(path: Option<&Path>) -> Self {
        Self {
            file: path.map_or(Origin::None, |p| Origin::File(p.to_path_buf())),
        }
    }

    /// `setting` of the file is wrong.
    pub(super) fn file(&self, setting: impl Into<String>, message: String) -> SettingsError {
        SettingsError {
            setting: setting.into(),
            message,
            origin: self.file.clone(),
        }
    }

    /// A setting of the file is wrong, as [`FieldError`] says.
    pub(super) fn field(&self, (setting, message): FieldError) -> SettingsError {
        self.file(setting, message)
    }

    /// The environment variable `var` is wrong.
    pub(super) fn env(&self, var: &str, message: String) -> SettingsError {
        SettingsError {
            setting: var.to_owned(),
            message,
            origin: Origin::Env,
        }
    }

    /// The setting that `source` names is wrong.
    pub(super) fn source(&self, source: Source, message: String) -> SettingsError {
        match source {
            Source::File(setting) => self.file(setting, message),
            Source::Env(var) => self.env(var, message),
        }
    }
}

// === impl Origin ===

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Env => f.write_str("environment variable "),
            Self::File(p) => write!(f, "{}: setting ", p.display()),
            Self::None => f.write_str("setting "),
        }
    }
}
