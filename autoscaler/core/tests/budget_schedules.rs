//! Disruption budgets on a schedule (Karpenter's `schedule` and `duration`): a budget is in
//! force only from each time its cron schedule fires (UTC) for its duration, and one out of
//! force limits nothing.
//!
//! The tables port kubernetes-sigs/karpenter `pkg/apis/v1/nodepool_budgets_test.go` as data
//! (its `IsActive` and `GetAllowedDisruptionsByReason` contexts, on its fake clock of
//! 2000-06-15 12:30:30 UTC); the plans show a `nodes: "0"` budget blocking a consolidation
//! inside its window and letting it through outside.

use autoscaler_core::cron::Cron;
use autoscaler_core::disruption::{DisruptionState, VerdictKind, budget_allows, plan_disruption};
use autoscaler_core::model::{
    Budget, BudgetSchedule, BudgetValue, DisruptionPolicy, DisruptionReason,
};

mod support;
use support::karpenter::*;
use support::{names, removed, snap};

/// Karpenter's fake clock: 2000-06-15 12:30:30 UTC.
const UPSTREAM_NOW: i64 = 961_072_230;
/// Monday 2024-03-04 10:00 UTC.
const MONDAY_10AM: i64 = 1_709_546_400;
/// Saturday 2024-03-09 10:00 UTC.
const SATURDAY_10AM: i64 = 1_709_978_400;

const HOUR: i64 = 3600;

fn scheduled(
    nodes: BudgetValue,
    reasons: &[DisruptionReason],
    cron: &str,
    duration_s: i64,
) -> Budget {
    Budget {
        nodes,
        reasons: reasons.to_vec(),
        schedule: Some(BudgetSchedule {
            cron: Cron::parse(cron).unwrap(),
            duration_s,
        }),
    }
}

/// Upstream's `IsActive` context: (what it says, schedule, duration, now, active).
#[test]
fn is_active() {
    let cases: &[(&str, &str, i64, i64, bool)] = &[
        (
            "a schedule is active",
            "* * * * *",
            HOUR,
            UPSTREAM_NOW,
            true,
        ),
        (
            "a schedule is inactive",
            "@yearly",
            HOUR,
            UPSTREAM_NOW,
            false,
        ),
        // 2000-05-31 00:00 at UTC+1 is 2000-05-30 23:00 UTC: no midnight within 30 minutes.
        (
            "always considered in UTC",
            "@daily",
            30 * 60,
            959_727_600,
            false,
        ),
        // 1000-01-01 12:00 UTC.
        (
            "the hit in the middle of the duration",
            "@yearly",
            24 * HOUR,
            -30_610_180_800,
            true,
        ),
        // Sunday 2024-01-07 00:00 UTC.
        (
            "the duration longer than the recurrence",
            "@daily",
            48 * HOUR,
            1_704_585_600,
            true,
        ),
        (
            "the hit after the duration",
            "30 6 * * SUN",
            6 * HOUR,
            1_704_585_600,
            false,
        ),
    ];
    for (what, cron, duration, now, active) in cases {
        let b = scheduled(BudgetValue::Count(10), &[], cron, *duration);
        assert_eq!(b.active_at(*now), *active, "{what}");
    }
    let always = Budget {
        nodes: BudgetValue::Count(10),
        reasons: vec![],
        schedule: None,
    };
    assert!(always.active_at(UPSTREAM_NOW), "no schedule: always active");
    // Upstream's parse error case: a weekday range running backwards.
    let e = Cron::parse("0 0 * * tue-mon").unwrap_err().to_string();
    assert!(e.contains("starts after it ends"), "{e}");
}

/// Upstream's budgets: five every-minute budgets for an hour and a weekly `0` for all reasons.
fn upstream_budgets() -> Vec<Budget> {
    use DisruptionReason::*;
    let every = |nodes, reasons: &[DisruptionReason]| scheduled(nodes, reasons, "* * * * *", HOUR);
    vec![
        every(BudgetValue::Count(10), &[]),
        every(BudgetValue::Count(100), &[]),
        every(BudgetValue::Percent(100), &[]),
        every(BudgetValue::Count(15), &[Drifted, Underutilized]),
        every(BudgetValue::Count(5), &[Drifted]),
        scheduled(
            BudgetValue::Count(0),
            &[Underutilized, Drifted, Empty],
            "@weekly",
            HOUR,
        ),
    ]
}

/// Upstream's `GetAllowedDisruptionsByReason` context, on a pool of 100 nodes: (what it
/// says, the budgets changed, allowed per reason Empty, Underutilized, Drifted).
#[test]
fn allowed_disruptions_by_reason() {
    use DisruptionReason::*;
    type Change = fn(&mut Vec<Budget>);
    let cases: &[(&str, Change, [i64; 3])] = &[
        (
            "0 for all reasons if a budget is active for all reasons",
            |b| b[5].schedule.as_mut().unwrap().cron = Cron::parse("* * * * *").unwrap(),
            [0, 0, 0],
        ),
        (
            "unbounded for all reasons when no budget is active",
            |b| {
                for x in b.iter_mut() {
                    x.schedule.as_mut().unwrap().cron = Cron::parse("@yearly").unwrap();
                }
            },
            [i64::MAX, i64::MAX, i64::MAX],
        ),
        (
            "reason-defined budgets ignored when inactive",
            |b| {
                for x in &mut b[3..5] {
                    x.schedule.as_mut().unwrap().cron = Cron::parse("@yearly").unwrap();
                }
            },
            [10, 10, 10],
        ),
        (
            "the budget for all reasons when undefined",
            |b| b.truncate(1),
            [10, 10, 10],
        ),
        (
            "the minimum budget for each reason",
            |b| {
                b.push(Budget {
                    nodes: BudgetValue::Count(4),
                    reasons: vec![DisruptionReason::Empty],
                    schedule: Some(BudgetSchedule {
                        cron: Cron::parse("* * * * *").unwrap(),
                        duration_s: HOUR,
                    }),
                })
            },
            [4, 10, 5],
        ),
    ];
    for (what, change, expected) in cases {
        let mut budgets = upstream_budgets();
        change(&mut budgets);
        let got =
            [Empty, Underutilized, Drifted].map(|r| budget_allows(&budgets, 100, r, UPSTREAM_NOW));
        assert_eq!(&got, expected, "{what}");
    }
}

/// `n1` (one pod) consolidates onto `n0` under a pool whose budgets are `budgets`, at `now`?
fn consolidation_at(budgets: Vec<Budget>, now: i64) -> autoscaler_core::DisruptionPlan {
    let policy = DisruptionPolicy {
        budgets,
        ..karpenter_policy()
    };
    let s = snap(
        two_least([rs_pod("a"), rs_pod("b"), rs_pod("c")]),
        vec![kpool("p", vec![least()]).disruption(policy)],
    );
    plan_disruption(&s, &DisruptionState::default(), now, &config())
}

/// Business hours on weekdays allow no disruption; the rest of the week, everything.
fn business_hours_freeze() -> Vec<Budget> {
    vec![
        scheduled(BudgetValue::Count(0), &[], "0 9 * * mon-fri", 8 * HOUR),
        Budget {
            nodes: BudgetValue::Percent(100),
            reasons: vec![],
            schedule: None,
        },
    ]
}

#[test]
fn an_active_zero_budget_blocks_consolidation() {
    let plan = consolidation_at(business_hours_freeze(), MONDAY_10AM);
    assert!(plan.commands.is_empty(), "{}", plan.render());
    let v = plan.verdicts.iter().find(|v| v.node == "n1").unwrap();
    assert_eq!(v.kind, VerdictKind::BudgetExhausted, "{}", plan.render());
}

#[test]
fn an_inactive_zero_budget_lets_consolidation_through() {
    let plan = consolidation_at(business_hours_freeze(), SATURDAY_10AM);
    assert_eq!(removed(&plan), names(&["n1"]), "{}", plan.render());
    // After hours on a weekday too: the window closed at 17:00.
    let plan = consolidation_at(business_hours_freeze(), MONDAY_10AM + 7 * HOUR);
    assert_eq!(removed(&plan), names(&["n1"]), "{}", plan.render());
    // The same budget without a schedule blocks at any time.
    let mut always = business_hours_freeze();
    always[0].schedule = None;
    let plan = consolidation_at(always, SATURDAY_10AM);
    assert!(plan.commands.is_empty(), "{}", plan.render());
}

/// A schedule on a budget for one reason leaves the other reasons alone while active.
#[test]
fn an_active_budget_for_one_reason_blocks_only_that_reason() {
    let plan = consolidation_at(
        vec![scheduled(
            BudgetValue::Count(0),
            &[DisruptionReason::Drifted],
            "0 9 * * mon-fri",
            8 * HOUR,
        )],
        MONDAY_10AM,
    );
    assert_eq!(removed(&plan), names(&["n1"]), "{}", plan.render());
}
