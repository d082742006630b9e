//! A class's remembered answers per slot, with a count per block of the slots refused, so
//! that the walk over open claims can pass over a block no pod of the class can join.

use super::BLOCK;

/// Per slot: whether pods of one class may go there (unknown, yes, no), and per block of
/// [`BLOCK`] slots how many are known to be "no".
///
/// A "no" for a new claim stays true while that claim exists (its candidates only shrink),
/// so a block whose every slot is "no" refuses every pod of the class until an answer in it
/// is forgotten: the slot index is reused after a rolled-back group.
#[derive(Clone, Debug, Default)]
pub(super) struct SlotAnswers {
    answers: Vec<Answer>,
    refused: Vec<u16>,
}

/// What is known of one slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(super) enum Answer {
    #[default]
    Unknown,
    Yes,
    No,
}

impl SlotAnswers {
    /// The answer remembered for slot `si`.
    pub(super) fn get(&self, si: usize) -> Answer {
        self.answers.get(si).copied().unwrap_or_default()
    }

    /// Remembers `ok` for slot `si`.
    pub(super) fn set(&mut self, si: usize, ok: bool) {
        self.put(si, if ok { Answer::Yes } else { Answer::No });
    }

    /// Forgets the answer for slot `si` (a new claim at that index).
    pub(super) fn forget(&mut self, si: usize) {
        if si < self.answers.len() {
            self.put(si, Answer::Unknown);
        }
    }

    /// Whether every slot of block `b` is known to refuse the class.
    pub(super) fn block_refused(&self, b: usize) -> bool {
        self.refused
            .get(b)
            .is_some_and(|&n| usize::from(n) == BLOCK)
    }

    fn put(&mut self, si: usize, a: Answer) {
        if self.answers.len() <= si {
            self.answers.resize(si + 1, Answer::Unknown);
        }
        let old = std::mem::replace(&mut self.answers[si], a);
        let b = si / BLOCK;
        if self.refused.len() <= b {
            self.refused.resize(b + 1, 0);
        }
        match (old == Answer::No, a == Answer::No) {
            (false, true) => self.refused[b] += 1,
            (true, false) => self.refused[b] -= 1,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_refused_only_while_every_slot_in_it_is() {
        let mut a = SlotAnswers::default();
        for si in 0..BLOCK - 1 {
            a.set(si, false);
        }
        assert!(!a.block_refused(0), "one slot of the block is unknown");
        a.set(BLOCK - 1, true);
        assert!(!a.block_refused(0), "one slot of the block is a yes");
        a.set(BLOCK - 1, false);
        assert!(a.block_refused(0));
        // Setting a "no" twice counts it once.
        a.set(BLOCK - 1, false);
        assert!(a.block_refused(0));
        a.forget(3);
        assert_eq!(a.get(3), Answer::Unknown);
        assert!(!a.block_refused(0), "a forgotten answer reopens the block");
        assert!(!a.block_refused(1), "no slot of the next block is known");
        a.forget(10 * BLOCK);
        assert_eq!(a.get(10 * BLOCK), Answer::Unknown);
    }
}
