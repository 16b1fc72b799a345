//! Forked, pinned children released together through a pipe barrier, with result slots
//! in shared memory and reaping on every path, Drop included.

use crate::clock::Clock;
use crate::platform::CpuMask;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};

/// One child's slot: its start stamp (ticks, at its release) and what its body returned.
#[derive(Clone, Copy, Default)]
#[repr(C)]
struct ChildSlot<T> {
    start: u64,
    value: T,
}

/// Up to `n` forked children per round, each pinned, dying with the parent, released at
/// once and writing one `T` to its slot in an anonymous shared mapping.
pub(crate) struct Children<'c, T: Copy + Default> {
    clock: &'c dyn Clock,
    ptr: *mut ChildSlot<T>,
    n: usize,
    /// Children forked and not yet reaped.
    pids: std::cell::RefCell<Vec<libc::pid_t>>,
}

impl<'c, T: Copy + Default> Children<'c, T> {
    pub(crate) fn new(n: usize, clock: &'c dyn Clock) -> anyhow::Result<Self> {
        let p = super::region::anonymous(Self::len(n), libc::MAP_SHARED)?;
        Ok(Children {
            clock,
            ptr: p as *mut ChildSlot<T>,
            n,
            pids: Default::default(),
        })
    }

    fn len(n: usize) -> usize {
        n.max(1) * std::mem::size_of::<ChildSlot<T>>()
    }

    /// Forks `p` children, child i pinned to `cpus[i % cpus.len()]`, releases them
    /// together once all are ready, and reaps them; each runs `body(i, start)` after its
    /// release (`start` its stamp) and stores what it returns. `what` names a child in
    /// errors ("reader process").
    ///
    /// # Safety
    /// The parent may have threads: `body` must make only async-signal-safe calls, on
    /// memory prepared before this call, and must end in bounded time (where the system
    /// has no parent-death signal, only the barrier's end of file and that bound end it).
    pub(crate) unsafe fn run(
        &self,
        p: usize,
        cpus: &[CpuMask],
        what: &str,
        body: impl Fn(usize, u64) -> T,
    ) -> anyhow::Result<()> {
        assert!(p <= self.n && !cpus.is_empty());
        let (ready, go) = (crate::platform::pipe()?, crate::platform::pipe()?);
        let barrier = Barrier { ready, go };
        let fork_err = (0..p).find_map(|i| {
            let cpu = &cpus[i % cpus.len()];
            self.fork(i, cpu, Some(&barrier), |start| body(i, start))
                .err()
        });
        let forked = self.pids.borrow().len();
        let got = barrier.release(forked);
        let failed = self.reap();
        if let Some(e) = fork_err {
            anyhow::bail!("fork failed after {forked} processes: {e}");
        }
        if failed > 0 || got < p {
            anyhow::bail!("{failed} of {p} {what}es failed ({got} became ready)");
        }
        Ok(())
    }

    /// Forks child `i` on `cpu` into a cleared slot, held at `barrier` if any.
    fn fork(
        &self,
        i: usize,
        cpu: &CpuMask,
        barrier: Option<&Barrier>,
        body: impl FnOnce(u64) -> T,
    ) -> std::io::Result<()> {
        assert!(i < self.n);
        // SAFETY: i < n slots in the mapping; its child is not running yet.
        let slot = unsafe { self.ptr.add(i) };
        // SAFETY: as above.
        unsafe { slot.write_volatile(ChildSlot::default()) };
        // SAFETY: fork; the child runs only `child` (the caller's async-signal-safe
        // body on memory prepared before the fork) and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: in the freshly forked child; `child` ends with _exit.
            unsafe { child(self.clock, cpu, barrier, slot, body) }
        }
        if pid < 0 {
            return Err(std::io::Error::last_os_error());
        }
        self.pids.borrow_mut().push(pid);
        Ok(())
    }

    /// Forks a long-lived child `i` on `cpu`, not held at a barrier, that runs `body` (a
    /// partner the caller stops through pipes of its own); `wait`, then `get(i)`.
    ///
    /// # Safety
    /// As `run`, except that `body` ends once the caller stops it.
    pub(crate) unsafe fn spawn(
        &self,
        i: usize,
        cpu: &CpuMask,
        body: impl FnOnce() -> T,
    ) -> std::io::Result<()> {
        self.fork(i, cpu, None, |_| body())
    }

    /// Reaps every child `spawn` forked; an error when any did not exit cleanly.
    pub(crate) fn wait(&self, what: &str) -> anyhow::Result<()> {
        match self.reap() {
            0 => Ok(()),
            failed => anyhow::bail!("{failed} {what}es did not exit cleanly"),
        }
    }

    /// Child i's start stamp (ticks) and result, after `run`.
    pub(crate) fn get(&self, i: usize) -> (u64, T) {
        assert!(i < self.n);
        // SAFETY: i < n slots in the mapping; the children have exited when this is read.
        let s = unsafe { std::ptr::read_volatile(self.ptr.add(i)) };
        (s.start, s.value)
    }

    /// Waits for every child forked; returns how many did not exit cleanly.
    fn reap(&self) -> usize {
        self.pids
            .borrow_mut()
            .drain(..)
            .filter(|&pid| {
                !crate::platform::reap(pid, false)
                    .is_ok_and(|s| libc::WIFEXITED(s) && libc::WEXITSTATUS(s) == 0)
            })
            .count()
    }
}

impl<T: Copy + Default> Drop for Children<'_, T> {
    fn drop(&mut self) {
        // Only after a panic mid-round: the barrier's write end is closed by then, so the
        // children are released and end in bounded time.
        self.reap();
        // SAFETY: unmapping exactly the mapping made in `new`.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, Self::len(self.n)) };
    }
}

/// Two pipes (read end, write end): each child writes `ready`, then blocks reading `go`
/// until the parent closes `go`'s write end.
struct Barrier {
    ready: (OwnedFd, OwnedFd),
    go: (OwnedFd, OwnedFd),
}

impl Barrier {
    /// Closes the children's ends, so a child's exit reads as end of file, waits until
    /// `n` children are ready (or gone), then releases them all; how many became ready.
    fn release(self, n: usize) -> usize {
        drop((self.ready.1, self.go.0));
        let mut ready = std::fs::File::from(self.ready.0);
        let (mut got, mut b) = (0, [0u8; 64]);
        while got < n {
            match ready.read(&mut b) {
                Ok(0) | Err(_) => break,
                Ok(r) => got += r,
            }
        }
        drop(self.go.1);
        got
    }
}

/// # Safety
/// Only in a freshly forked child (the parent has threads: async-signal-safe calls only,
/// on memory prepared before fork, `body` too); `slot` points into the shared mapping.
unsafe fn child<T>(
    clock: &dyn Clock,
    cpu: &CpuMask,
    barrier: Option<&Barrier>,
    slot: *mut ChildSlot<T>,
    body: impl FnOnce(u64) -> T,
) -> ! {
    // Where the system has no parent-death signal, the barrier pipe's end of file and the
    // body's own time bound still end the child.
    let _ = crate::platform::die_with_parent();
    cpu.pin_self();
    if let Some(Barrier { ready, go }) = barrier {
        // The parent's ends: a child holding `go`'s write end open would never be released.
        libc::close(go.1.as_raw_fd());
        libc::close(ready.0.as_raw_fd());
        let one = [1u8];
        libc::write(ready.1.as_raw_fd(), one.as_ptr() as *const libc::c_void, 1);
        let mut b = [0u8];
        // Released: the parent closes the write end when every child is ready; read sees EOF.
        libc::read(go.0.as_raw_fd(), b.as_mut_ptr() as *mut libc::c_void, 1);
    }
    // The run's clock: its reads are plain instructions or clock_gettime, both safe here.
    let start = clock.now();
    std::ptr::addr_of_mut!((*slot).start).write_volatile(start);
    let value = body(start);
    std::ptr::addr_of_mut!((*slot).value).write_volatile(value);
    libc::_exit(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_run_released_and_report_into_their_slots() {
        let clock = crate::clock::CoarseClock::new(1e9);
        let cpus = [crate::platform::CpuMask::single(crate::platform::allowed_cpus()[0]).unwrap()];
        let children = Children::<u64>::new(3, &clock).unwrap();
        let base = 7u64;
        for _ in 0..2 {
            // SAFETY: the body only does arithmetic on a value copied before the fork.
            unsafe { children.run(3, &cpus, "test process", |i, _| base + i as u64) }.unwrap();
            for i in 0..3 {
                let (start, v) = children.get(i);
                assert_eq!(v, base + i as u64);
                assert!(start > 0);
            }
        }
        assert!(children.pids.borrow().is_empty());
    }
}
