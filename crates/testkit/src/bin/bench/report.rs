//! The table the bench prints, and the latency samples its rows are made of.

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

/// One row of the table.
pub(crate) struct Row {
    pub(crate) name: String,
    pub(crate) rps: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) note: String,
}

/// One line on standard output.
pub(crate) fn say(line: &str) {
    let _ = writeln!(std::io::stdout(), "{line}");
}

pub(crate) fn row(name: String, s: &Samples, note: String) -> Row {
    Row {
        name,
        rps: s.rps(),
        p50_ms: s.p50(),
        p99_ms: s.p99(),
        note,
    }
}

pub(crate) fn render(rows: &[Row], notes: &[String]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "| measurement | req/s | p50 ms | p99 ms | note |");
    let _ = writeln!(out, "|---|---:|---:|---:|---|");
    for r in rows {
        let rps = if r.rps > 0.0 {
            format!("{:.0}", r.rps)
        } else {
            "–".into()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {:.3} | {:.3} | {} |",
            r.name, rps, r.p50_ms, r.p99_ms, r.note
        );
    }
    for n in notes {
        let _ = writeln!(out, "\n{n}");
    }
    out
}

/// Latencies of one load run, and how long it took.
pub(crate) struct Samples {
    pub(crate) micros: Vec<u32>,
    pub(crate) elapsed: Duration,
}

impl Samples {
    pub(crate) fn pct(&self, p: f64) -> f64 {
        if self.micros.is_empty() {
            return 0.0;
        }
        let mut v = self.micros.clone();
        v.sort_unstable();
        let i = ((v.len() as f64 - 1.0) * p).round() as usize;
        f64::from(v[i]) / 1000.0
    }
    pub(crate) fn p50(&self) -> f64 {
        self.pct(0.50)
    }
    pub(crate) fn p99(&self) -> f64 {
        self.pct(0.99)
    }
    pub(crate) fn rps(&self) -> f64 {
        self.micros.len() as f64 / self.elapsed.as_secs_f64()
    }
}
