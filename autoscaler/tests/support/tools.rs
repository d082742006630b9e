//! Finding the external programs some tests use (helm, kubernetes-validate, mdbook): named by
//! an environment variable, else looked up on `PATH`; absent means the test says it skipped.

use std::path::PathBuf;

/// The program named by the environment variable `env`, else `name` on `PATH`.
pub fn tool(env: &str, name: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}
