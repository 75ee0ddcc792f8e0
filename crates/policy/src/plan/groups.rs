//! A plan's groups of equivalent targets put in the group choice's order
//! ([`crate::balance`]): each group's available members found in the plan
//! and moved into place without cloning, the first becoming the primary
//! when the group is the route's first step.

use understudy_types::target::Target;

use super::Plan;

/// Orders each group's available members in `plan` by the group choice
/// ([`crate::balance::order`]). A group's members are the route's targets
/// `members[g]` (the route as resolved, before availability); `member`
/// gives a member's snapshot for its weight, `seed` is the request's only
/// chance. When the route's first step is a group, the member chosen first
/// becomes the primary: serving from it is not falling back. A forced plan
/// (every breaker open) is left as it is.
pub fn balance_groups<'m>(
    plan: &mut Plan,
    members: impl IntoIterator<Item = (&'m [Target], &'m [u32], bool)>,
    member: impl Fn(&Target, u32) -> crate::balance::Member,
    now: std::time::Instant,
    seed: u64,
    knobs: &understudy_settings::BalanceSettings,
) {
    if plan.forced {
        return;
    }
    for (g, (targets, weights, first_step)) in members.into_iter().enumerate() {
        let seed = group_seed(seed, g);
        if targets.len() <= SMALL_GROUP {
            // A small group's places and snapshot on the stack.
            let mut at = [0; SMALL_GROUP];
            let mut snapshot = [crate::balance::Member::default(); SMALL_GROUP];
            let mut n = 0;
            for (t, &w) in targets.iter().zip(weights) {
                if let Some(p) = plan.targets.iter().position(|p| p == t) {
                    (at[n], snapshot[n]) = (p, member(t, w));
                    n += 1;
                }
            }
            order_placed(plan, &at[..n], &snapshot[..n], first_step, now, seed, knobs);
        } else {
            let (at, snapshot): (Vec<usize>, Vec<crate::balance::Member>) = targets
                .iter()
                .zip(weights)
                .filter_map(|(t, &w)| {
                    let at = plan.targets.iter().position(|p| p == t)?;
                    Some((at, member(t, w)))
                })
                .unzip();
            order_placed(plan, &at, &snapshot, first_step, now, seed, knobs);
        }
    }
}

/// The seed of a route's `g`-th group (counting the groups
/// [`balance_groups`] is given) from the request's `seed`.
pub fn group_seed(seed: u64, g: usize) -> u64 {
    seed.wrapping_add((g as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// Orders one group's available members, found at places `at` of `plan`
/// with `snapshot` their stats (in the group's written order), by the
/// group choice with the group's `seed` ([`group_seed`]); the first
/// becomes the primary when the group is the route's `first_step` and
/// leads the plan. [`balance_groups`] finds the places by comparing
/// targets; a caller that knows them already (where the route's targets
/// went) passes them here. A forced plan is the caller's to leave alone.
pub fn order_placed(
    plan: &mut Plan,
    at: &[usize],
    snapshot: &[crate::balance::Member],
    first_step: bool,
    now: std::time::Instant,
    seed: u64,
    knobs: &understudy_settings::BalanceSettings,
) {
    if at.len() <= SMALL_GROUP {
        let mut order = [0; SMALL_GROUP];
        let order = &mut order[..at.len()];
        crate::balance::order_into(snapshot, now, seed, knobs, order);
        place(plan, at, order, first_step);
    } else {
        let mut order = crate::balance::order(snapshot, now, seed, knobs);
        place(plan, at, &mut order, first_step);
    }
}

/// The most members of a group [`balance_groups`] orders without
/// allocating.
pub const SMALL_GROUP: usize = 8;

/// Moves a group's available members, at places `at` of `plan` (in the
/// written order: availability only removes), into the group choice's
/// `order` (indices into `at`; used up), by swaps along its cycles
/// (`at[j]` takes what was at `at[order[j]]`), none cloned; the first
/// becomes the primary when the group is the route's `first_step` and
/// leads the plan.
fn place(plan: &mut Plan, at: &[usize], order: &mut [usize], first_step: bool) {
    if at.is_empty() {
        return;
    }
    for start in 0..order.len() {
        let mut j = start;
        loop {
            // A visited place is marked in `order` itself.
            let k = std::mem::replace(&mut order[j], usize::MAX);
            if k == usize::MAX || k == start {
                break;
            }
            plan.targets.swap(at[j], at[k]);
            j = k;
        }
    }
    if first_step && at[0] == 0 {
        plan.primary = plan.targets[0].clone();
        plan.balanced = true;
    }
}
