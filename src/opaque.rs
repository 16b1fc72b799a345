//! Values the optimiser must compute but cannot see through, and the canonical measured
//! loop built on them (docs/ARCHITECTURE.md, "One timing path"). A leaf: clock, harness,
//! sentinel and the experiments' kernels all use it, and it uses nothing of the crate.

/// The canonical measured loop: `op` runs `iters` times and its result cannot be discarded.
/// Kernels use this (or the same shape) so that the loop overhead measured on an empty
/// body is the overhead they carry.
///
/// Register-only: the counter and each result stay in registers. `black_box` would store
/// every result to the stack, and how store forwarding and memory-dependence prediction
/// then settle varies from run to run.
/// The counter passes through `hide` each iteration, so the trip count is unknown to the
/// optimiser and the loop is neither unrolled nor collapsed.
#[inline(always)]
pub fn repeat<T: Reg>(iters: u64, mut op: impl FnMut() -> T) {
    let mut i = iters;
    while i != 0 {
        keep(op());
        i = hide(i).wrapping_sub(1);
    }
}

/// A value that fits one general-purpose register, so `keep` can consume it without memory.
pub trait Reg: Copy {
    fn bits(self) -> u64;
}
macro_rules! reg_int {
    ($($t:ty),*) => {$(
        impl Reg for $t {
            #[inline(always)]
            fn bits(self) -> u64 {
                self as u64
            }
        }
    )*};
}
reg_int!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize, bool);
impl Reg for () {
    #[inline(always)]
    fn bits(self) -> u64 {
        0
    }
}
impl<P> Reg for *const P {
    #[inline(always)]
    fn bits(self) -> u64 {
        self as usize as u64
    }
}
impl<P> Reg for *mut P {
    #[inline(always)]
    fn bits(self) -> u64 {
        self as usize as u64
    }
}

/// Consumes `v` in a register: the compiler must compute it but stores nothing. Also a
/// compiler barrier (the asm may have side effects) that does not touch memory.
#[inline(always)]
pub fn keep<T: Reg>(v: T) {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    // SAFETY: an empty asm statement reading one register; no memory, stack or flags.
    unsafe {
        core::arch::asm!("/* keep {0} */", in(reg) v.bits(), options(nomem, nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    std::hint::black_box(v.bits());
}

/// Returns `v` unchanged, but the optimiser cannot know its value; it stays in a register.
#[inline(always)]
pub fn hide(v: u64) -> u64 {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        let mut v = v;
        // SAFETY: an empty asm statement that may "change" one register; no memory or flags.
        unsafe {
            core::arch::asm!("/* hide {0} */", inout(reg) v, options(nomem, nostack, preserves_flags))
        };
        v
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    std::hint::black_box(v)
}
