//! What a lost or rolled-back booking's NodeClaim deletions did, for its condition message.

/// What deleting a booking's NodeClaims did.
#[derive(Default)]
pub(super) struct Cleanup {
    pub(super) deleted: usize,
    /// Left for consolidation: their nodes run pods that would have to move.
    pub(super) kept: usize,
    /// Their deletion failed (the API's error is logged).
    pub(super) failed: usize,
}

impl Cleanup {
    /// The claims not deleted, for a condition message: "" when none.
    pub(super) fn except(&self) -> String {
        let mut parts = Vec::new();
        if self.kept > 0 {
            parts.push(format!(
                "{} kept, whose nodes run other pods (consolidation drains them)",
                self.kept
            ));
        }
        if self.failed > 0 {
            parts.push(format!("{} whose deletion failed", self.failed));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!(" except {}", parts.join(" and "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cleanup;

    #[test]
    fn a_cleanup_names_the_claims_it_did_not_delete_and_why() {
        let c = |deleted, kept, failed| Cleanup {
            deleted,
            kept,
            failed,
        };
        assert_eq!(c(3, 0, 0).except(), "");
        assert_eq!(
            c(1, 2, 0).except(),
            " except 2 kept, whose nodes run other pods (consolidation drains them)"
        );
        assert_eq!(c(2, 0, 1).except(), " except 1 whose deletion failed");
        assert_eq!(
            c(0, 1, 1).except(),
            " except 1 kept, whose nodes run other pods (consolidation drains them) and 1 whose deletion failed"
        );
    }
}
