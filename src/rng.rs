//! The crate's one pseudo-random generator (SplitMix64) and Sattolo's single-cycle
//! permutation. A leaf: the memory chases, the sentinel, fs's block orders and file
//! contents and io's written data all draw from it, and it uses only the platform's raw
//! clock (for `from_entropy`).

/// SplitMix64: small, fast, and its output neither compresses nor deduplicates, which is
/// enough to shuffle and to fill files; seeded per run where each run should walk a
/// different permutation.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// Seeded from the time and the process id.
    pub(crate) fn from_entropy() -> Rng {
        let t = crate::platform::raw_clock_ns();
        Rng(t ^ ((std::process::id() as u64) << 32) ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in 0..bound (bound > 0), by multiply-high; the bias is below 2^-32 for
    /// the bounds used here.
    pub(crate) fn below(&mut self, bound: usize) -> usize {
        ((self.next_u64() as u128 * bound as u128) >> 64) as usize
    }

    /// Fisher-Yates shuffle.
    pub(crate) fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }

    /// A uniformly shuffled 0..n.
    pub(crate) fn permutation(&mut self, n: usize) -> Vec<u32> {
        let mut v: Vec<u32> = (0..n as u32).collect();
        self.shuffle(&mut v);
        v
    }

    /// Fills `buf` with the next pseudo-random bytes (little-endian words, the last one cut).
    pub(crate) fn fill(&mut self, buf: &mut [u8]) {
        let mut chunks = buf.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let r = chunks.into_remainder();
        if !r.is_empty() {
            let v = self.next_u64().to_le_bytes();
            let n = r.len();
            r.copy_from_slice(&v[..n]);
        }
    }
}

/// Sattolo's algorithm: a uniformly random cyclic permutation of 0..n, as `next[i]`.
/// Unlike a plain shuffle, following `next` from any node visits all n nodes before it
/// returns (a shuffle can leave short cycles that fit in a cache).
pub fn sattolo(n: usize, rng: &mut Rng) -> Vec<u32> {
    let mut next: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        let j = rng.below(i); // j < i: never a fixed point, always one cycle
        next.swap(i, j);
    }
    next
}

/// Length of the cycle through node 0 (n for a single cycle over n nodes).
pub fn cycle_length(next: &[u32]) -> usize {
    if next.is_empty() {
        return 0;
    }
    let mut i = next[0] as usize;
    let mut len = 1;
    while i != 0 && len <= next.len() {
        i = next[i] as usize;
        len += 1;
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sattolo_is_one_cycle() {
        let mut rng = Rng::new(1);
        for n in [1usize, 2, 3, 10, 1000] {
            let p = sattolo(n, &mut rng);
            assert_eq!(cycle_length(&p), n);
        }
    }

    #[test]
    fn a_plain_shuffle_can_leave_short_cycles() {
        // The reason for Sattolo: identity is a valid shuffle and has n cycles.
        let ident: Vec<u32> = (0..8).collect();
        assert_eq!(cycle_length(&ident), 1);
    }

    #[test]
    fn permutation_is_a_permutation() {
        let mut r = Rng::new(7);
        let mut p = r.permutation(1000);
        assert_ne!(p[..10], (0..10).collect::<Vec<u32>>()[..]);
        p.sort_unstable();
        assert_eq!(p, (0..1000).collect::<Vec<u32>>());
    }

    #[test]
    fn fill_covers_a_tail_and_continues_the_stream() {
        let mut a = Rng::new(1);
        let mut buf = [0u8; 13];
        a.fill(&mut buf);
        let mut b = Rng::new(1);
        assert_eq!(buf[..8], b.next_u64().to_le_bytes());
        assert_eq!(buf[8..], b.next_u64().to_le_bytes()[..5]);
        assert_eq!(a.next_u64(), b.next_u64());
    }
}
