//! `cargo xtask bench routing-cost [--runs N]`: what the group choice and a
//! session lookup cost a request, counted by callgrind, two ways.
//!
//! - **In the functions that do them**: callgrind's inclusive count of the
//!   functions that make the group choice, in a route of one group of three
//!   equivalent targets (`tier:1`), and of those that look a session up,
//!   pin it and note it, in a request with a `prompt_cache_key` on a
//!   two-target route (`sessions:1`). Only requests run them, so their
//!   counts repeat from run to run: this is the figure held against
//!   [`TARGET`].
//! - **As a difference of totals**: `tier:1` − `three:1` (the same three as
//!   a plain list) and `sessions:1` − `unpinned:1` (the same route without
//!   affinity): everything such a request costs beyond its plain twin,
//!   the functions' work and what they leave out (the event's extra fields
//!   through the sinks, longer provider names looked up by name, the
//!   allocator). Two totals of ~165 000 differ by up to ±1 500 between runs
//!   of one binary, so each phase is run `--runs` times (3 unless told) and
//!   the median is reported beside each run.
//!
//! Each figure is measured as the own-work fence measures (the difference
//! of 3 000 and 1 000 requests, halved, prober off), with the settings file
//! watcher's polls left out (`--toggle-collect`): they come with time, not
//! with requests, and a run under valgrind is long enough for them to
//! count. A Redis round trip is not in either (the bench has no Redis).

use std::collections::HashMap;
use std::path::Path;

use crate::own_work;

/// What the two together should stay under, in instructions per request.
pub(crate) const TARGET: f64 = 5_000.0;

/// How many times each phase is measured unless `--runs` says otherwise.
const RUNS: usize = 3;

/// Callgrind leaves these functions out of its counts: the settings file
/// watcher's loop and tokio's blocking pool it reads the file on.
const WITHOUT_WATCHER: &str =
    "--toggle-collect=*cmd::reload::run* --toggle-collect=*blocking::pool::Inner::run*";

/// The functions that make the group choice, by the end of their symbols
/// (each kept out of line so that callgrind names it): the members' stats
/// read and their order chosen, the plan's seed, each call's member's
/// stats found, and each call counted in them. Left out, as a few
/// instructions each that sit on every request's path: the route's places
/// kept (`Resolved::of`) and the event's `balanced`.
pub(crate) const CHOICE_FNS: &[&str] = &[
    "prepare::Resolved::balance",
    "TargetStats::next_seed",
    "prepare::Resolved::stat",
    "TargetStat::enter",
    "TargetStat::leave",
    "TargetStat::record",
];

/// The functions of a session (as [`CHOICE_FNS`]): whether the route pins
/// sessions (asked of every request while affinity is on), the key and
/// the pin looked up, the run's session made, the pin put first, the
/// switch cost weighed (on a failure only), the pin moved and the event's
/// note, and the run's session freed. Left out: the note carried through
/// the event's sinks.
pub(crate) const SESSION_FNS: &[&str] = &[
    "Looked::applies",
    "Looked::here",
    "Looked::into_run",
    "plan::pin_first",
    "Run>::weigh_pinned",
    "Run>::pin_moved",
    "drop_in_place<core::option::Option<alloc::boxed::Box<understudy_core::run::session::RunAffinity>>>",
];

/// One run's instructions per request: the four phases' totals and the
/// functions' inclusive counts (in [`CHOICE_FNS`] and [`SESSION_FNS`]
/// order).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Run {
    pub(crate) tier: f64,
    pub(crate) three: f64,
    pub(crate) sessions: f64,
    pub(crate) unpinned: f64,
    pub(crate) choice_fns: Vec<f64>,
    pub(crate) session_fns: Vec<f64>,
}

impl Run {
    pub(crate) fn choice(&self) -> f64 {
        self.tier - self.three
    }
    pub(crate) fn session(&self) -> f64 {
        self.sessions - self.unpinned
    }
    pub(crate) fn choice_own(&self) -> f64 {
        self.choice_fns.iter().sum()
    }
    pub(crate) fn session_own(&self) -> f64 {
        self.session_fns.iter().sum()
    }
}

pub(crate) fn run(root: &Path, args: &[String]) -> Result<(), String> {
    let runs = match args {
        [] => RUNS,
        [flag, n] if flag == "--runs" => n
            .parse()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("--runs takes a count above 0, not `{n}`"))?,
        _ => return Err("usage: cargo xtask bench routing-cost [--runs N]".into()),
    };
    own_work::need_valgrind()?;
    crate::build_bench("profiling")?;
    let bins = root.join("target").join("profiling");
    let work = root.join("target").join("routing-cost");
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let mut all = Vec::with_capacity(runs);
    for i in 1..=runs {
        crate::note(&format!("routing cost: run {i} of {runs}"));
        let phase = |phase, fns| measure(&bins, &work, phase, fns);
        let (tier, choice_fns) = phase("tier:1", CHOICE_FNS)?;
        let (three, _) = phase("three:1", &[])?;
        let (sessions, session_fns) = phase("sessions:1", SESSION_FNS)?;
        let (unpinned, _) = phase("unpinned:1", &[])?;
        all.push(Run {
            tier,
            three,
            sessions,
            unpinned,
            choice_fns,
            session_fns,
        });
    }
    use std::io::Write as _;
    let _ = std::io::stdout().write_all(report(&all).as_bytes());
    Ok(())
}

/// `phase`'s instructions per request, and those of each of `fns`
/// (inclusive), from its runs at the fence's two counts.
fn measure(bins: &Path, work: &Path, phase: &str, fns: &[&str]) -> Result<(f64, Vec<f64>), String> {
    let mut totals = [0u64; 2];
    let mut inclusive = [Vec::new(), Vec::new()];
    for (k, count) in own_work::COUNTS.into_iter().enumerate() {
        let out = own_work::callgrind_with(bins, work, phase, count, WITHOUT_WATCHER)?;
        totals[k] = out.total;
        let text = std::fs::read_to_string(&out.file)
            .map_err(|e| format!("{}: {e}", out.file.display()))?;
        inclusive[k] = inclusive_of(&text, fns);
    }
    let span = (own_work::COUNTS[1] - own_work::COUNTS[0]) as f64;
    let per = |low: u64, high: u64| (high as f64 - low as f64) / span;
    let fns = inclusive[0]
        .iter()
        .zip(&inclusive[1])
        .map(|(&low, &high)| per(low, high))
        .collect();
    Ok((per(totals[0], totals[1]), fns))
}

/// The inclusive instructions of each of `fns` (the end of a symbol, see
/// [`names`]) in a callgrind output file: what the function did itself and
/// what the calls it made did, summed over every symbol it names. A
/// recursion level callgrind names apart (`'2`) is inside its outer one.
pub(crate) fn inclusive_of(callgrind_out: &str, fns: &[&str]) -> Vec<u64> {
    let mut by_id: HashMap<&str, &str> = HashMap::new();
    let mut per_fn: HashMap<&str, u64> = HashMap::new();
    let mut current: &str = "";
    for line in callgrind_out.lines() {
        if let Some(rest) = line.strip_prefix("fn=") {
            current = name_of(rest, &mut by_id);
        } else if let Some(rest) = line.strip_prefix("cfn=") {
            // Only to learn a compressed name's id.
            name_of(rest, &mut by_id);
        } else if line.starts_with(|c: char| c.is_ascii_digit() || "+-*".contains(c)) {
            // A cost line: the function's own cost at a position, or (after
            // a `calls=` line) a call's inclusive cost; both are inside the
            // function's inclusive count.
            let cost: u64 = line
                .split_whitespace()
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            *per_fn.entry(current).or_default() += cost;
        }
    }
    fns.iter()
        .map(|f| {
            per_fn
                .iter()
                .filter(|(name, _)| names(name, f))
                .map(|(_, &n)| n)
                .sum()
        })
        .collect()
}

/// A `fn=` or `cfn=` value's name: `(id) name` (its first use), `(id)`
/// (later ones) or a bare name.
fn name_of<'t>(value: &'t str, by_id: &mut HashMap<&'t str, &'t str>) -> &'t str {
    let Some(rest) = value.strip_prefix('(') else {
        return value;
    };
    let Some((id, name)) = rest.split_once(')') else {
        return value;
    };
    let name = name.trim_start();
    if name.is_empty() {
        by_id.get(id).copied().unwrap_or("")
    } else {
        by_id.insert(id, name);
        name
    }
}

/// Whether symbol `name` is function `f`: it ends with `f` after a path
/// separator, a `<` or a space (`understudy_core::run::session::Looked::applies`
/// is `Looked::applies`; `Looked::applies::{{closure}}` is not).
fn names(name: &str, f: &str) -> bool {
    name.strip_suffix(f).is_some_and(|before| {
        before.is_empty()
            || before.ends_with("::")
            || before.ends_with('<')
            || before.ends_with(' ')
    })
}

/// The middle value of `xs` (the mean of the two middle ones for an even
/// count).
pub(crate) fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The report: the functions' figures (the one held against [`TARGET`]),
/// then the totals' differences of every run and their medians.
pub(crate) fn report(runs: &[Run]) -> String {
    let of = |f: fn(&Run) -> f64| runs.iter().map(f).collect::<Vec<_>>();
    let listed = |xs: &[f64]| {
        xs.iter()
            .map(|x| format!("{x:.0}"))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let by_fn = |fns: &[&str], pick: fn(&Run) -> &Vec<f64>| {
        fns.iter()
            .enumerate()
            .map(|(i, f)| {
                let each: Vec<f64> = runs
                    .iter()
                    .map(|r| pick(r).get(i).copied().unwrap_or_default())
                    .collect();
                format!("      {f}: {:.0}\n", median(&each))
            })
            .collect::<String>()
    };
    let (choice_own, session_own) = (of(Run::choice_own), of(Run::session_own));
    let own = median(&of(|r| r.choice_own() + r.session_own()));
    let (choice, session) = (of(Run::choice), of(Run::session));
    let together = median(&of(|r| r.choice() + r.session()));
    let verdict = |x: f64| if x < TARGET { "under" } else { "OVER" };
    format!(
        "callgrind, instructions per request ((3 000 − 1 000 requests) / 2 000, prober off, \
         the settings watcher left out), {n} run(s), medians:\n\
         \x20 in the functions that do them (inclusive; held against the target: only \
         requests run them, so they repeat between runs):\n\
         \x20   group choice (tier:1): {c_own:.0} (runs: {c_own_runs})\n{c_fns}\
         \x20   session (sessions:1): {s_own:.0} (runs: {s_own_runs})\n{s_fns}\
         \x20   together {own:.0}: {own_verdict} the target of {TARGET:.0}\n\
         \x20 as a difference of totals (all such a request adds to its plain twin, \
         with what moves between runs: up to ±1 500 a row):\n\
         \x20   group choice: tier:1 − three:1 = {c:.0} (runs: {c_runs})\n\
         \x20   session: sessions:1 − unpinned:1 = {s:.0} (runs: {s_runs})\n\
         \x20   together {together:.0} ({t_verdict} {TARGET:.0})\n",
        n = runs.len(),
        c_own = median(&choice_own),
        c_own_runs = listed(&choice_own),
        c_fns = by_fn(CHOICE_FNS, |r| &r.choice_fns),
        s_own = median(&session_own),
        s_own_runs = listed(&session_own),
        s_fns = by_fn(SESSION_FNS, |r| &r.session_fns),
        own_verdict = verdict(own),
        c = median(&choice),
        c_runs = listed(&choice),
        s = median(&session),
        s_runs = listed(&session),
        t_verdict = verdict(together),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inclusive_counts_add_a_functions_own_cost_and_its_calls() {
        // Compressed names, a call, a cost line after it, relative
        // positions, a closure that is not the function, and a symbol
        // named again later by its id.
        let out = "version: 1\ncreator: callgrind\nevents: Ir\n\
            fl=(1) a.rs\n\
            fn=(1) understudy_core::run::session::Looked::applies\n\
            10 5\n+1 7\n\
            cfl=(1)\ncfn=(2) understudy_policy::plan::route_name\n\
            calls=1 20\n11 40\n\
            fn=(2)\n20 40\n\
            fn=(3) understudy_core::run::session::Looked::applies::{{closure}}\n30 100\n\
            fn=(1)\n* 3\n\
            totals: 195\n";
        assert_eq!(
            inclusive_of(out, &["Looked::applies", "plan::route_name", "missing"]),
            vec![5 + 7 + 40 + 3, 40, 0]
        );
    }

    #[test]
    fn a_name_is_matched_at_a_path_boundary() {
        assert!(names("a::b::Looked::here", "Looked::here"));
        assert!(names(
            "understudy_core::run::session::<impl understudy_core::run::Run>::pin_moved",
            "Run>::pin_moved"
        ));
        assert!(!names("a::b::NotLooked::here", "Looked::here"));
        assert!(!names("a::Looked::here::{{closure}}", "Looked::here"));
    }

    #[test]
    fn the_report_holds_the_functions_against_the_target_and_shows_the_totals() {
        let run = |tier, sessions, own: f64| Run {
            tier,
            three: 175_000.0,
            sessions,
            unpinned: 176_500.0,
            choice_fns: vec![own, 100.0],
            session_fns: vec![own, 200.0],
        };
        // Medians: the choice 2 000 (1 000, 2 000, 3 500), the session
        // 1 500, the functions 1 100 + 1 200.
        let runs = [
            run(176_000.0, 178_000.0, 1_000.0),
            run(177_000.0, 178_000.0, 1_000.0),
            run(178_500.0, 181_500.0, 1_001.0),
        ];
        let text = report(&runs);
        assert!(
            text.contains("group choice (tier:1): 1100 (runs: 1100; 1100; 1101)"),
            "{text}"
        );
        assert!(text.contains("session (sessions:1): 1200"), "{text}");
        assert!(
            text.contains("together 2300: under the target of 5000"),
            "{text}"
        );
        assert!(text.contains("= 2000 (runs: 1000; 2000; 3500)"), "{text}");
        assert!(text.contains("= 1500 (runs: 1500; 1500; 5000)"), "{text}");
        assert!(text.contains("together 3500 (under 5000)"), "{text}");
        let over = [run(176_000.0, 178_000.0, 3_000.0)];
        assert!(
            report(&over).contains("together 6300: OVER"),
            "{}",
            report(&over)
        );
        assert_eq!(median(&[3.0, 1.0]), 2.0);
    }
}
