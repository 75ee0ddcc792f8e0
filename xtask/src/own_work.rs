//! `cargo xtask bench own-work`: the fence on the gateway's own work.
//! Callgrind counts the instructions of the plain request (`closed:1`), the
//! fallback (`fallback:1`) and the axum + reqwest floor (`stack-closed:1`)
//! at 1 000 and 3 000 requests (one request is the difference halved), then
//! prints own work (gateway minus floor) beside the figures checked in as
//! `bench/own-work.toml` and how far each moved; a growth over 3 % fails.
//! `--write` puts today's figures in that file instead of comparing.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The checked-in figures, relative to the workspace root.
pub(crate) const FILE: &str = "bench/own-work.toml";

/// How much own work may grow over the checked-in figure, in percent.
const GROWTH_LIMIT: f64 = 3.0;

/// The two request counts; one request is `(at 3 000 − at 1 000) / 2 000`.
pub(crate) const COUNTS: [u64; 2] = [1000, 3000];

/// Instructions per request of each measured phase.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Figures {
    pub(crate) floor: f64,
    pub(crate) plain: f64,
    pub(crate) fallback: f64,
}

impl Figures {
    pub(crate) fn plain_own(&self) -> f64 {
        self.plain - self.floor
    }
    pub(crate) fn fallback_own(&self) -> f64 {
        self.fallback - self.floor
    }
}

/// `bench/own-work.toml`: the figures, when and on what they were measured.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CheckedIn {
    pub(crate) date: String,
    pub(crate) commit: String,
    pub(crate) figures: Figures,
}

pub(crate) fn run(root: &Path, args: &[String]) -> Result<(), String> {
    let write = match args {
        [] => false,
        [w] if w == "--write" => true,
        _ => return Err("usage: cargo xtask bench own-work [--write]".into()),
    };
    need_valgrind()?;
    crate::build_bench("profiling")?;
    let bins = root.join("target").join("profiling");
    let work = root.join("target").join("own-work");
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let mut per_request = Vec::new();
    for phase in ["stack-closed:1", "closed:1", "fallback:1"] {
        per_request.push(per_request_of(&bins, &work, phase, "")?);
    }
    report_and_check(root, write, per_request)
}

/// Whether valgrind runs here, or the error that says it does not.
pub(crate) fn need_valgrind() -> Result<(), String> {
    if valgrind_present() {
        return Ok(());
    }
    Err(
        "valgrind is missing: the own-work fence cannot be measured \
         (install it, e.g. `apt-get install valgrind`, and run again)"
            .into(),
    )
}

/// Instructions per request of `phase`: the totals at the two counts,
/// their difference over the difference of the counts.
pub(crate) fn per_request_of(
    bins: &Path,
    work: &Path,
    phase: &str,
    extra: &str,
) -> Result<f64, String> {
    let [low, high] = COUNTS.map(|n| callgrind_with(bins, work, phase, n, extra));
    let (low, high) = (low?.total, high?.total);
    Ok((high as f64 - low as f64) / (COUNTS[1] - COUNTS[0]) as f64)
}

fn report_and_check(root: &Path, write: bool, per_request: Vec<f64>) -> Result<(), String> {
    let now = Figures {
        floor: per_request[0],
        plain: per_request[1],
        fallback: per_request[2],
    };
    let file = root.join(FILE);
    if write {
        let checked = CheckedIn {
            date: today()?,
            commit: head(root)?,
            figures: now,
        };
        std::fs::write(&file, render(&checked)).map_err(|e| format!("{}: {e}", file.display()))?;
        crate::note(&format!("wrote {}", file.display()));
        show(&report(&now, Some(&checked)).0);
        return Ok(());
    }
    let checked = std::fs::read_to_string(&file)
        .map_err(|e| format!("{}: {e}", file.display()))
        .and_then(|text| parse(&text).map_err(|e| format!("{}: {e}", file.display())))?;
    let (text, grew) = report(&now, Some(&checked));
    show(&text);
    if grew {
        Err(format!(
            "own work grew by more than {GROWTH_LIMIT} % over {FILE}: find what \
             the change added, or say why in the submission and update the file \
             with `cargo xtask bench own-work --write`"
        ))
    } else {
        Ok(())
    }
}

fn show(text: &str) {
    use std::io::Write as _;
    let _ = std::io::stdout().write_all(text.as_bytes());
}

fn valgrind_present() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// One callgrind run: the process's total instructions, and the file that
/// holds its counts by function.
pub(crate) struct Counted {
    pub(crate) total: u64,
    pub(crate) file: PathBuf,
}

/// The bench's `phase` under callgrind with `count` requests (after its
/// 200 of warm-up), the gateway pinned to core 0 where that is possible;
/// returns the process's total instructions and the output file.
/// `extra`: more of valgrind's options, written into the wrapper's command
/// line as they are.
pub(crate) fn callgrind_with(
    bins: &Path,
    work: &Path,
    phase: &str,
    count: u64,
    extra: &str,
) -> Result<Counted, String> {
    let tag = format!("{}-{count}", phase.replace(':', "-"));
    let out = work.join(format!("{tag}.callgrind"));
    let pid_file = work.join(format!("{tag}.pid"));
    let wrap = work.join("wrap.sh");
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&pid_file);
    // Valgrind runs in the background with its pid written down: the bench
    // stops the wrapper, and valgrind writes its counts only once the
    // process under it exits (on SIGTERM, sent below).
    let script = format!(
        "#!/bin/sh\nexport GLIBC_TUNABLES={}\n\
         export UNDERSTUDY_PROBE=off\n\
         valgrind --tool=callgrind {extra} --callgrind-out-file={} \"$@\" &\n\
         echo $! > {}\nwait\n",
        gateway_tunables()?,
        out.display(),
        pid_file.display()
    );
    std::fs::write(&wrap, script)
        .and_then(|()| {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&wrap, std::fs::Permissions::from_mode(0o755))
        })
        .map_err(|e| format!("{}: {e}", wrap.display()))?;
    let bench = bins.join("understudy-bench");
    let pinned = crate::bench_pinned();
    let mut cmd = if pinned {
        let mut c = Command::new("taskset");
        c.args(["-c", "0"]).arg(&bench);
        c
    } else {
        Command::new(&bench)
    };
    cmd.arg(bins.join("understudy")).arg(work.join("run"));
    if pinned {
        cmd.arg("0");
    }
    let log = work.join(format!("{tag}.log"));
    let log_file = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    crate::note(&format!("callgrind: {phase}, {count} requests"));
    let status = cmd
        .env("UNDERSTUDY_BENCH_ONLY", phase)
        .env("UNDERSTUDY_BENCH_COUNT", count.to_string())
        .env("UNDERSTUDY_BENCH_WRAP", &wrap)
        // The bench waits for the prober's first round unless its own
        // environment turns the prober off (the wrapper's is too late).
        .env("UNDERSTUDY_PROBE", "off")
        .stdout(log_file.try_clone().map_err(|e| e.to_string())?)
        .stderr(log_file)
        .status()
        .map_err(|e| format!("cannot run {}: {e}", bench.display()))?;
    if let Ok(pid) = std::fs::read_to_string(&pid_file) {
        stop(pid.trim())?;
    }
    if !status.success() {
        return Err(format!("{phase} failed ({status}); see {}", log.display()));
    }
    let text = std::fs::read_to_string(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let total = total(&text).ok_or_else(|| format!("{}: no totals line", out.display()))?;
    Ok(Counted { total, file: out })
}

/// The `GLIBC_TUNABLES` the gateway starts itself with (its `TUNABLES`),
/// read from its source: the wrapper sets them, so that the gateway runs
/// under valgrind as it runs itself (and does not start itself again
/// outside it); the relays run with the same.
fn gateway_tunables() -> Result<String, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/cli/src/malloc.rs");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .find_map(|line| line.strip_prefix("const TUNABLES: &str = \""))
        .and_then(|rest| rest.strip_suffix("\";"))
        .map(str::to_owned)
        .ok_or_else(|| format!("{}: no `const TUNABLES` line", path.display()))
}

/// SIGTERM to valgrind (its process stops gracefully and callgrind writes
/// its file), then waits for it to be gone.
fn stop(pid: &str) -> Result<(), String> {
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("valgrind's pid is `{pid}`"));
    }
    let _ = Command::new("kill").args(["-TERM", pid]).status();
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let deadline = Instant::now() + Duration::from_secs(120);
    while proc_dir.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    if proc_dir.exists() {
        return Err(format!("valgrind (pid {pid}) did not exit within 120 s"));
    }
    Ok(())
}

/// The total instructions of a callgrind output file (its `summary:` or
/// `totals:` line).
pub(crate) fn total(callgrind_out: &str) -> Option<u64> {
    callgrind_out.lines().find_map(|l| {
        let rest = l
            .strip_prefix("summary:")
            .or_else(|| l.strip_prefix("totals:"))?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The report: each figure, own work beside the checked-in one and how
/// far it moved; `true` when one grew over [`GROWTH_LIMIT`].
pub(crate) fn report(now: &Figures, then: Option<&CheckedIn>) -> (String, bool) {
    let mut out = String::from(
        "callgrind, instructions per request ((3 000 − 1 000 requests) / 2 000, prober off):\n",
    );
    out.push_str(&format!(
        "  axum + reqwest floor (stack-closed:1)  {:>9.0}\n",
        now.floor
    ));
    let mut grew = false;
    for (name, total, own, was) in [
        (
            "plain request (closed:1)    ",
            now.plain,
            now.plain_own(),
            then.map(|t| t.figures.plain_own()),
        ),
        (
            "fallback (fallback:1)       ",
            now.fallback,
            now.fallback_own(),
            then.map(|t| t.figures.fallback_own()),
        ),
    ] {
        out.push_str(&format!(
            "  {name}           {total:>9.0}  own work {own:>7.0}"
        ));
        if let (Some(was), Some(t)) = (was, then) {
            let moved = moved_percent(own, was);
            let flag = if moved > GROWTH_LIMIT {
                grew = true;
                "  GROWTH over 3 %"
            } else {
                ""
            };
            out.push_str(&format!(
                "  (checked in: {was:.0} on {} at {}; {moved:+.1} %){flag}",
                t.date, t.commit
            ));
        }
        out.push('\n');
    }
    (out, grew)
}

/// How far `now` moved from `was`, in percent.
pub(crate) fn moved_percent(now: f64, was: f64) -> f64 {
    if was == 0.0 {
        return 0.0;
    }
    (now - was) / was * 100.0
}

pub(crate) fn render(c: &CheckedIn) -> String {
    format!(
        "# The gateway's own work, instructions per request under callgrind\n\
         # ((3 000 − 1 000 requests) / 2 000, prober off): written by\n\
         # `cargo xtask bench own-work --write`, compared by `cargo xtask bench\n\
         # own-work`. Own work is the gateway's figure minus `floor`.\n\
         date = \"{}\"\ncommit = \"{}\"\n\
         # axum + reqwest relay doing nothing (stack-closed:1)\nfloor = {:.0}\n\
         # plain request (closed:1)\nplain = {:.0}\n\
         # fallback, 503 then answer (fallback:1)\nfallback = {:.0}\n",
        c.date, c.commit, c.figures.floor, c.figures.plain, c.figures.fallback
    )
}

/// Reads what [`render`] writes (`key = value` lines, `#` comments).
pub(crate) fn parse(text: &str) -> Result<CheckedIn, String> {
    let get = |key: &str| -> Result<String, String> {
        text.lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .find_map(|l| {
                let (k, v) = l.split_once('=')?;
                (k.trim() == key).then(|| v.trim().trim_matches('"').to_owned())
            })
            .ok_or_else(|| format!("no `{key}`"))
    };
    let number = |key: &str| -> Result<f64, String> {
        let v = get(key)?;
        v.parse()
            .map_err(|_| format!("`{key}` is `{v}`, not a number"))
    };
    let figures = Figures {
        floor: number("floor")?,
        plain: number("plain")?,
        fallback: number("fallback")?,
    };
    Ok(CheckedIn {
        date: get("date")?,
        commit: get("commit")?,
        figures,
    })
}

fn today() -> Result<String, String> {
    output(Command::new("date").args(["-u", "+%Y-%m-%d"]))
}

fn head(root: &Path) -> Result<String, String> {
    output(
        Command::new("git")
            .args(["rev-parse", "--short", "HEAD"])
            .current_dir(root),
    )
}

fn output(cmd: &mut Command) -> Result<String, String> {
    let o = cmd.output().map_err(|e| e.to_string())?;
    if !o.status.success() {
        return Err(format!("{cmd:?} failed ({})", o.status));
    }
    Ok(String::from_utf8_lossy(&o.stdout).trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures() -> Figures {
        Figures {
            floor: 86_000.0,
            plain: 160_000.0,
            fallback: 250_000.0,
        }
    }

    #[test]
    fn reads_callgrind_totals() {
        let out = "version: 1\ncreator: callgrind\nevents: Ir\nsummary: 613213153\n\nfn=main\n";
        assert_eq!(total(out), Some(613_213_153));
        assert_eq!(total("events: Ir\ntotals: 42\n"), Some(42));
        assert_eq!(total("events: Ir\n"), None);
    }

    #[test]
    fn the_file_reads_back_what_it_wrote() {
        let c = CheckedIn {
            date: "2026-12-06".into(),
            commit: "abc1234".into(),
            figures: figures(),
        };
        assert_eq!(parse(&render(&c)), Ok(c));
        assert_eq!(
            parse("date = \"x\"\ncommit = \"y\"\nfloor = 1\nplain = many\n"),
            Err("`plain` is `many`, not a number".into())
        );
    }

    #[test]
    fn growth_over_three_percent_is_flagged() {
        let then = CheckedIn {
            date: "2026-12-06".into(),
            commit: "abc1234".into(),
            figures: figures(),
        };
        // Own work 74 000 and 164 000 checked in.
        let mut now = figures();
        now.plain += 2_000.0; // +2.7 %
        let (text, grew) = report(&now, Some(&then));
        assert!(!grew, "{text}");
        assert!(text.contains("+2.7 %"), "{text}");
        now.fallback += 6_000.0; // +3.7 %
        let (text, grew) = report(&now, Some(&then));
        assert!(grew, "{text}");
        assert!(text.contains("GROWTH over 3 %"), "{text}");
        assert_eq!(moved_percent(70_300.0, 74_000.0), -5.0);
    }
}
