//! `cargo xtask bench routing-cost`: what the group choice and a session
//! lookup add to a request, counted by callgrind. The group choice is a
//! route of one group of three equivalent targets (`tier:1`) against the
//! same three as a plain list (`three:1`); the session is a request with a
//! `prompt_cache_key` on a two-target route (`sessions:1`) against the same
//! route without affinity (`unpinned:1`). Each row is measured as the
//! own-work fence measures (the difference of 3 000 and 1 000 requests,
//! halved, prober off), with the settings file watcher's polls left out
//! (`--toggle-collect`): they come with time, not with requests, and a run
//! under valgrind is long enough for them to count.

use std::path::Path;

use crate::own_work;

/// What the two together should stay under, in instructions per request.
pub(crate) const TARGET: f64 = 5_000.0;

/// Callgrind leaves these functions out of its counts: the settings file
/// watcher's loop and tokio's blocking pool it reads the file on.
const WITHOUT_WATCHER: &str =
    "--toggle-collect=*cmd::reload::run* --toggle-collect=*blocking::pool::Inner::run*";

/// Instructions per request of the four rows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rows {
    pub(crate) tier: f64,
    pub(crate) three: f64,
    pub(crate) sessions: f64,
    pub(crate) unpinned: f64,
}

impl Rows {
    pub(crate) fn choice(&self) -> f64 {
        self.tier - self.three
    }
    pub(crate) fn session(&self) -> f64 {
        self.sessions - self.unpinned
    }
}

pub(crate) fn run(root: &Path) -> Result<(), String> {
    own_work::need_valgrind()?;
    crate::build_bench("profiling")?;
    let bins = root.join("target").join("profiling");
    let work = root.join("target").join("routing-cost");
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let row = |phase| own_work::per_request_of(&bins, &work, phase, WITHOUT_WATCHER);
    let rows = Rows {
        tier: row("tier:1")?,
        three: row("three:1")?,
        sessions: row("sessions:1")?,
        unpinned: row("unpinned:1")?,
    };
    use std::io::Write as _;
    let _ = std::io::stdout().write_all(report(&rows).as_bytes());
    Ok(())
}

/// The rows, the two differences and their sum beside [`TARGET`].
pub(crate) fn report(r: &Rows) -> String {
    let together = r.choice() + r.session();
    let verdict = if together < TARGET { "under" } else { "OVER" };
    format!(
        "callgrind, instructions per request ((3 000 − 1 000 requests) / 2 000, prober off, \
         the settings watcher left out):\n\
         \x20 group choice: tier:1 {:.0} − three:1 {:.0} = {:.0}\n\
         \x20 session:      sessions:1 {:.0} − unpinned:1 {:.0} = {:.0}\n\
         \x20 together {together:.0}: {verdict} the target of {TARGET:.0} \
         (two totals of ~170 000 differ by up to ±1 500 between runs of one binary: \
         run it twice before reading a move)\n",
        r.tier,
        r.three,
        r.choice(),
        r.sessions,
        r.unpinned,
        r.session(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_adds_the_two_differences_and_says_where_they_stand() {
        let rows = Rows {
            tier: 177_000.0,
            three: 175_000.0,
            sessions: 178_000.0,
            unpinned: 176_500.0,
        };
        let text = report(&rows);
        assert!(text.contains("= 2000\n"), "{text}");
        assert!(text.contains("= 1500\n"), "{text}");
        assert!(
            text.contains("together 3500: under the target of 5000"),
            "{text}"
        );
        let over = Rows {
            sessions: 181_500.0,
            ..rows
        };
        assert!(report(&over).contains("together 7000: OVER"));
    }
}
