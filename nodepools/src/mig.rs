//! Which MIG configuration names a NodePool may ask for.
//!
//! The planning core owns the MIG geometry (`autoscaler_core::gpu::mig`); this module only adds
//! the schema pattern and keeps the one call site validation goes through.

/// The OpenAPI pattern the CRD puts on a MIG configuration name (shape only: `all-<word>` or
/// `all-<profile>`; the exact list is checked by [`is_known_config`]).
pub const CONFIG_PATTERN: &str = r"^all-([a-z]+|[1-7]g\.[0-9]+gb(\.me)?)$";

/// Whether `name` is a MIG layout the GPU Operator knows for at least one MIG-capable GPU model
/// (`all-disabled`, `all-enabled`, `all-balanced`, `all-<profile>` such as `all-1g.10gb`).
pub fn is_known_config(name: &str) -> bool {
    autoscaler_core::gpu::mig::is_known_config(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_and_unknown_names() {
        for ok in [
            "all-1g.10gb",
            "all-balanced",
            "all-disabled",
            "all-7g.80gb",
            "all-1g.5gb.me",
        ] {
            assert!(is_known_config(ok), "{ok}");
        }
        for bad in ["all-9g.99gb", "1g.10gb", "", "all-", "ALL-BALANCED"] {
            assert!(!is_known_config(bad), "{bad}");
        }
    }
}
