//! Consolidation method 1, empty nodes: every empty candidate within its NodePool's `Empty`
//! budget, deleted in one command.

use crate::model::DisruptionReason;
use crate::plan::Plan;

use super::candidates::movable;
use super::{Command, Method, Pass, VerdictKind};

impl Pass<'_> {
    /// Phase 3: one delete command for the empty candidates the budgets admit.
    pub(super) fn empty(&mut self, candidates: &[usize]) {
        let snap = self.snap;
        let mut empties = Vec::new();
        let mut savings = 0.0;
        for ni in candidates {
            let n = &snap.nodes[*ni];
            if !movable(n).is_empty() {
                continue;
            }
            match self
                .allowance
                .admit(snap, &[n], DisruptionReason::Empty, false, true)
            {
                Ok(()) => {
                    empties.push(n.name.clone());
                    savings += n.price.unwrap_or(0.0);
                }
                Err(e) => self.keep(&n.name, e),
            }
        }
        if empties.is_empty() {
            return;
        }
        for name in &empties {
            self.disrupt(name, VerdictKind::Empty, "empty".into());
            self.gone.insert(name.clone());
        }
        let removed = self.indices(empties.iter().map(String::as_str));
        self.apply(&removed, &Plan::default());
        self.out.commands.push(Command {
            reason: DisruptionReason::Empty,
            method: Method::Delete,
            nodes: empties,
            pods: vec![],
            replacement: None,
            savings,
            decided_at: self.now,
        });
    }
}
