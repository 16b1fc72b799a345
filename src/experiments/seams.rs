//! Test seams: how a unit test bends the world an experiment meets, one value per thread;
//! `Seams::NONE`, a constant, outside unit tests, so every branch on it folds away.

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Seams {
    /// Fresh regions come already mapped (as under mlockall(MCL_FUTURE) or MAP_POPULATE).
    pub prefaulted: bool,
    /// The file system refuses O_DIRECT (EINVAL, as tmpfs and some FUSE ones do).
    pub no_direct: bool,
    /// "create + join" runs the start routine in the caller (a pthread that makes none).
    pub inline_create: bool,
    /// cpu.process-create's added region is left unwritten (reclaimed or swapped out).
    pub unwritten: bool,
    /// The program cpu.process-create spawns instead of `true` (`/bin/false`: a failing
    /// child, as under a seccomp filter or a broken exec).
    pub program: Option<&'static str>,
    /// The switches' pipe work alone makes this many more one-byte transfers than the
    /// round trip (the pipe alone slower than inside the round trip).
    pub pipe_alone_extra: usize,
    /// fs.contention's files are this size (readers run past the end and reread).
    pub small_files: Option<u64>,
    /// mem.loaded-latency's chase is on base pages, its reference keeping mem.latency's.
    pub chase_base_pages: bool,
    /// mem.loaded-latency's chase covers this many nodes, its reference the whole set
    /// (a chase that fits in a cache).
    pub chase_nodes: Option<usize>,
    /// A stepped thread team runs its members one after another instead of together (as
    /// under steal, staggered starts or throttling).
    pub serial_team: bool,
    /// cpu.signal's self-sent signal is ignored (SIG_IGN, as a library resetting the
    /// disposition would leave it): kill returns with no handler run.
    pub signal_ignored: bool,
}

impl Seams {
    pub(crate) const NONE: Seams = Seams {
        prefaulted: false,
        no_direct: false,
        inline_create: false,
        unwritten: false,
        program: None,
        pipe_alone_extra: 0,
        small_files: None,
        chase_base_pages: false,
        chase_nodes: None,
        serial_team: false,
        signal_ignored: false,
    };
}

#[cfg(test)]
thread_local! {
    static SEAMS: std::cell::Cell<Seams> = const { std::cell::Cell::new(Seams::NONE) };
}

/// This thread's seams: `Seams::NONE` outside unit tests.
#[inline(always)]
pub(crate) fn get() -> Seams {
    #[cfg(test)]
    return SEAMS.with(|s| s.get());
    #[cfg(not(test))]
    Seams::NONE
}

/// Bends this thread's world for the rest of a unit test.
#[cfg(test)]
pub(crate) fn set(f: impl FnOnce(&mut Seams)) {
    SEAMS.with(|s| {
        let mut v = s.get();
        f(&mut v);
        s.set(v);
    });
}

/// Whether `OSMETER_TEST_HANG` (unset in real runs) names `id`: the runner then waits on it
/// under `HUNG_LIMIT`, for a whole-binary test (an overrun ends the process).
pub(crate) fn hangs(id: &str) -> bool {
    static HUNG: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    HUNG.get_or_init(|| std::env::var("OSMETER_TEST_HANG").ok())
        .as_deref()
        == Some(id)
}

/// The hard limit of the experiment `OSMETER_TEST_HANG` names.
pub(crate) const HUNG_LIMIT: std::time::Duration = std::time::Duration::from_secs(1);
