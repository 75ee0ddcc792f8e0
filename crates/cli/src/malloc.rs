//! glibc's malloc, told to give large blocks back to the system: a
//! long-running gateway otherwise keeps the pages of a burst of large
//! requests resident for good.
//!
//! glibc raises its mmap threshold (the size from which a block gets pages
//! of its own, returned when freed) to the largest block freed so far, up to
//! 32 MiB: after one large request body, every block up to that size comes
//! from the per-thread arenas, whose freed pages stay resident. A fixed
//! threshold (`glibc.malloc.mmap_threshold`, here glibc's own initial
//! 128 KiB) stops the rise. (Its per-thread cache of small blocks is
//! deepened too: see [`TUNABLES`].) A tunable is read only as the process starts,
//! from `GLIBC_TUNABLES` (setting it from the running process would need
//! `unsafe`), so the server's commands start the binary again, once, with
//! it set. An operator's own `GLIBC_TUNABLES` is left as it is.
//!
//! Why not another allocator: measured in `docs/performance.md` ("Memory
//! after a burst"): mimalloc and jemalloc kept as much or more after the
//! same burst unless configured through their own environment variables
//! too, and raised the high-water mark of one large body past four times
//! its size (they copy where glibc's `realloc` remaps).

/// What the gateway sets: the fixed mmap threshold, and a deeper
/// per-thread cache of freed small blocks (`tcache_count`; glibc's default
/// keeps 7 of each size). A request frees dozens of small blocks; once a
/// size's cache is full the rest go to glibc's shared bins, which the next
/// large block sweeps up again (`malloc_consolidate`). At 128 a plain
/// request costs about 4 000 fewer instructions (callgrind; the axum +
/// reqwest relay, run with the same tunables, is unchanged), and a thread
/// keeps at most 128 freed blocks of each size up to 1 KiB. `cargo xtask
/// bench own-work` reads this line to run the gateway as it runs itself.
const TUNABLES: &str = "glibc.malloc.mmap_threshold=131072:glibc.malloc.tcache_count=128";

/// Set on the started-again process, so it never starts itself again:
/// glibc drops `GLIBC_TUNABLES` from the environment of a process that
/// runs with raised privileges (file capabilities such as
/// `cap_net_bind_service`, set-user-ID), so its absence alone cannot tell
/// a first start from the second.
const RESTARTED: &str = "UNDERSTUDY_MALLOC_TUNED";

/// Starts this binary again with [`TUNABLES`] in `GLIBC_TUNABLES`, unless
/// it is set already (by the operator) or this is the second start
/// ([`RESTARTED`]);
/// returns only when that cannot be done, and then the gateway runs with
/// glibc's defaults.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) fn restart_tuned() {
    use std::os::unix::process::CommandExt as _;
    if std::env::var_os("GLIBC_TUNABLES").is_some() || std::env::var_os(RESTARTED).is_some() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new(exe);
    if let Some(name) = args.next() {
        command.arg0(name);
    }
    // `exec` returns only on failure (a binary replaced or deleted since
    // it started): then glibc's defaults.
    let _ = command
        .args(args)
        .env("GLIBC_TUNABLES", TUNABLES)
        .env(RESTARTED, "1")
        .exec();
}

/// Other systems' allocators are left as they are.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn restart_tuned() {}
