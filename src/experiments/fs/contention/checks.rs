//! fs.contention's premises.

use super::*;

/// Largest spread of the readers' start times, as a share of a round.
pub(super) const RELEASE_SHARE: f64 = 0.10;

/// Premise "readers released together": every round's spread of start times (`spreads`,
/// ns) within RELEASE_SHARE of the round.
pub(crate) fn release_check(spreads: &[(usize, u64)], round_ns: u64) -> Check {
    let limit = (round_ns as f64 * RELEASE_SHARE) as u64;
    let worst = spreads.iter().max_by_key(|s| s.1).copied();
    let detail = match worst {
        Some((p, w)) => format!(
            "largest spread of start times {} (P = {p}) over {} rounds, limit {} (10% of a round); each reader timestamps its start right after a pipe barrier the parent opens once all are ready",
            crate::units::fmt_ns(w as f64),
            spreads.len(),
            crate::units::fmt_ns(limit as f64)
        ),
        None => "no round ran".into(),
    };
    let together = worst.is_some_and(|w| w.1 <= limit);
    Check::premise("readers released together", together, detail)
}

/// The premises: device reached, no block read twice, evictions verified, one release.
pub(super) fn checks(
    out: &mut Outcome,
    m: &ContentionRounds,
    direct: bool,
    sizes: &[u64],
    dur: Duration,
) {
    out.check(m.device.check());
    let reread: u64 = m
        .cursor
        .iter()
        .zip(sizes)
        .map(|(&c, &b)| c.saturating_sub(b / BLOCK as u64))
        .sum();
    let total: u64 = m.cursor.iter().sum();
    // A block read again may come from a device or host cache no counter sees: unverified,
    // not invalid, as the first reads were the device's.
    let detail = format!(
        "{} of {} blocks read were read before by the same reader (files of {} down to {}; a device or host cache can serve those)",
        reread,
        total,
        fmt_bytes(sizes.first().copied().unwrap_or(0) as f64),
        fmt_bytes(sizes.last().copied().unwrap_or(0) as f64)
    );
    out.check(if reread == 0 {
        Check::premise("each block read at most once", true, detail)
    } else {
        Check::unverified("each block read at most once", detail)
    });
    if !direct {
        let ev = &m.evictions;
        out.check(ev.premise(
            "uncached reads: files evicted and verified (mincore) before every round",
            format!("O_DIRECT not supported; {} of {} evictions verified (a file larger than a round's reads, random advice)", ev.passed, ev.total),
        ));
    }
    out.check(release_check(&m.spreads, dur.as_nanos() as u64));
}
