//! Test seams: what a unit test changes about how an experiment meets the world (a file
//! system that refuses O_DIRECT, memory mapped in advance), gathered in one value per
//! thread. Outside unit tests it is `Seams::NONE`, a constant, so every branch on it
//! folds away.

/// The ways a unit test may bend the world an experiment sees; all off in production.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Seams {
    /// Fresh regions come already mapped (as under mlockall(MCL_FUTURE) or MAP_POPULATE),
    /// so a first touch takes no page fault.
    pub prefaulted: bool,
    /// The file system refuses O_DIRECT (EINVAL, as tmpfs and some FUSE file systems do),
    /// so uncached reads rely on eviction alone.
    pub no_direct: bool,
    /// "create + join" runs the start routine in the caller, as a pthread library that
    /// never makes a thread would.
    pub inline_create: bool,
    /// cpu.process-create's added region is left unwritten, so none of it is resident (as
    /// memory reclaimed or swapped out before the timing).
    pub unwritten: bool,
    /// The program cpu.process-create spawns instead of `true` (`/bin/false`: a child that
    /// fails, as under a seccomp filter or a broken exec).
    pub program: Option<&'static str>,
    /// The pipe work the switches measure alone makes this many more one-byte transfers
    /// than the round trip does, as when the pipe alone runs slower than inside the round
    /// trip (another cache state, another frequency).
    pub pipe_alone_extra: usize,
    /// fs.contention's files are this size (a few blocks: readers run past the end and read
    /// blocks again, as when the device is faster than the sizing assumes).
    pub small_files: Option<u64>,
    /// mem.loaded-latency's chase is mapped on base pages whatever the kernel offers, while
    /// its reference chase keeps mem.latency's page kind (a chase that lost its huge pages).
    pub chase_base_pages: bool,
    /// mem.loaded-latency's chase is laid over only this many nodes of its buffer, while its
    /// reference chase covers the whole working set (a chase that fits in a cache).
    pub chase_nodes: Option<usize>,
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

/// The experiment that never returns, for a test that must run the whole binary (the
/// process, not a unit test, is what an overrun ends): the id in `OSMETER_TEST_HANG`, read
/// once. The runner then waits on that experiment in place of running it, under
/// `HUNG_LIMIT`, so such a test takes seconds. Unset (as in every real run), nothing hangs.
pub(crate) fn hangs(id: &str) -> bool {
    static HUNG: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    HUNG.get_or_init(|| std::env::var("OSMETER_TEST_HANG").ok())
        .as_deref()
        == Some(id)
}

/// The hard limit of the experiment `OSMETER_TEST_HANG` names.
pub(crate) const HUNG_LIMIT: std::time::Duration = std::time::Duration::from_secs(1);
