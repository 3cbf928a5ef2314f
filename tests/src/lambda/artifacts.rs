//! Where the programs are: the emulator `tests/env/install` built into the cache, and the
//! functions' `bootstrap` files `sam build` made (`tests/env/check-deploy --build`, into
//! `SAM_BUILD_DIR`, by default `target/sam-build`, one directory per architecture).
//!
//! A bootstrap older than the sources it is built from would test yesterday's code: it is
//! refused with the command that rebuilds it.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::LambdaError;

/// The command that builds what the tests run (the test command runs it first).
pub const BUILD_COMMAND: &str = "SAM_BUILD_MODE=debug tests/env/check-deploy --build";

/// The repository's root.
pub fn repo_dir() -> PathBuf {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR"));
    tests.parent().unwrap_or(tests).to_owned()
}

/// `aws-lambda-rie` in the install cache (`STACK_ENV_CACHE`, as `tests/env/lib.sh` reads it).
pub fn emulator_path() -> Result<PathBuf, LambdaError> {
    let cache = match std::env::var_os("STACK_ENV_CACHE") {
        Some(dir) => PathBuf::from(dir),
        None => std::env::home_dir()
            .ok_or(LambdaError::NoHome)?
            .join(".cache/stack-provisioner"),
    };
    let path = cache.join("bin/aws-lambda-rie");
    if path.is_file() {
        Ok(path)
    } else {
        Err(LambdaError::Missing {
            path,
            fix: "tests/env/install",
        })
    }
}

/// `sam build`'s output for this machine's architecture.
pub fn build_dir() -> PathBuf {
    let root = match std::env::var_os("SAM_BUILD_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_dir().join("target"))
            .join("sam-build"),
    };
    root.join(sam_architecture())
}

/// The template's name for this machine's architecture (`Architecture` parameter).
pub fn sam_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "aarch64" => "arm64",
        other => other,
    }
}

/// How the bootstraps in `dir` were built (`debug` or `release`), as check-deploy recorded it.
pub fn build_mode(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("build-mode"))
        .map(|mode| mode.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// Where the functions' bootstraps come from.
#[derive(Debug, Clone)]
pub enum Bootstraps {
    /// `sam build`'s output for one architecture: `<dir>/<LogicalId>/bootstrap`.
    SamBuild(PathBuf),
    /// The binaries cargo builds into `<dir>` (`target/release`), named as `template.yaml`'s
    /// `BuildProperties` tell cargo-lambda: the same code and profile, linked by cargo.
    Cargo(PathBuf),
}

impl Bootstraps {
    /// This checkout's `sam build` for this machine ([`build_dir`]).
    pub fn sam_build() -> Self {
        Bootstraps::SamBuild(build_dir())
    }

    /// The bootstrap of function `logical_id` (cargo binary `binary`), refused when missing or
    /// older than a source file of the workspace's functions.
    pub fn bootstrap(&self, logical_id: &str, binary: Option<&str>) -> Result<PathBuf, LambdaError> {
        let (path, fix) = match self {
            Bootstraps::SamBuild(dir) => (dir.join(logical_id).join("bootstrap"), BUILD_COMMAND),
            Bootstraps::Cargo(dir) => (
                dir.join(binary.unwrap_or(logical_id)),
                "cargo build --release -p stack-api -p stack-reconciler",
            ),
        };
        fresh(path, fix)
    }

    pub fn describe(&self) -> String {
        match self {
            Bootstraps::SamBuild(dir) => format!("{} (sam build, {})", dir.display(), build_mode(dir)),
            Bootstraps::Cargo(dir) => format!("{} (cargo)", dir.display()),
        }
    }
}

/// `path`, when it exists and is newer than every source file.
fn fresh(path: PathBuf, fix: &'static str) -> Result<PathBuf, LambdaError> {
    let built = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .map_err(|_| LambdaError::Missing {
            path: path.clone(),
            fix,
        })?;
    if let Some((newer, _)) = newest_source()?.filter(|(_, changed)| *changed > built) {
        return Err(LambdaError::Stale {
            bootstrap: path,
            newer,
            fix,
        });
    }
    Ok(path)
}

/// The most recently changed file the bootstraps are built from (Markdown aside).
fn newest_source() -> Result<Option<(PathBuf, SystemTime)>, LambdaError> {
    let root = repo_dir();
    let mut newest = None;
    for entry in ["Cargo.toml", "Cargo.lock", "shared", "functions"] {
        visit(&root.join(entry), &mut newest)?;
    }
    Ok(newest)
}

fn visit(path: &Path, newest: &mut Option<(PathBuf, SystemTime)>) -> Result<(), LambdaError> {
    let read = |source| LambdaError::Read {
        path: path.to_owned(),
        source,
    };
    let metadata = std::fs::metadata(path).map_err(read)?;
    if metadata.is_dir() {
        for entry in std::fs::read_dir(path).map_err(read)? {
            visit(&entry.map_err(read)?.path(), newest)?;
        }
        return Ok(());
    }
    if path.extension().is_some_and(|e| e == "md") {
        return Ok(());
    }
    let changed = metadata.modified().map_err(read)?;
    if newest.as_ref().is_none_or(|(_, time)| changed > *time) {
        *newest = Some((path.to_owned(), changed));
    }
    Ok(())
}
