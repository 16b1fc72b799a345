//! fs.contention: P processes, each reading its own file uncached, released together by
//! a barrier; per-block time vs P and a fitted (piecewise) linear model.

use crate::clock::Deadline;
use crate::experiments::kit::children::Children;
use crate::experiments::kit::files::{
    direct_works, evict_check, make_file, reopen, DeviceReads, RepeatedCheck, BLOCK, MIB,
};
use crate::experiments::predict::{Input, Predictions};
use crate::experiments::spec::ms;
use crate::experiments::{Context, Experiment, Needs, Outcome, PerProfile, Profile, Spec};
use crate::pagecache::AlignedBuf;
use crate::results::{Check, Prediction};
use crate::rng::Rng;
use crate::units::{fmt_bytes, fmt_ns};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::time::Duration;

mod readers;
mod text;
use readers::*;
use text::*;

pub struct Contention;

const PMAX: PerProfile<usize> = PerProfile::new(3, 6, 16, 50);

/// Process counts tried: every P up to 8, then steps that keep about 20 points.
fn counts(p: Profile) -> Vec<usize> {
    let max = PMAX.get(p);
    let step = (max / 20).max(2);
    let mut v: Vec<usize> = (1..=max.min(8))
        .chain((8 + step..max).step_by(step))
        .collect();
    if v.last() != Some(&max) {
        v.push(max);
    }
    v
}

/// How long every process reads in one round, and rounds per P.
const ROUND: PerProfile<(Duration, usize)> =
    PerProfile::new((ms(60), 1), (ms(80), 2), (ms(300), 3), (ms(400), 3));

/// Per-block time the files are sized for when fs.read measured none in this run.
const FALLBACK_BLOCK_NS: f64 = 100_000.0;

/// Blocks a file holds beyond what its reader reads at fs.read's median pace.
const MARGIN: f64 = 1.25;

/// Most bytes the readers' files take together, per profile.
const MAX_TOTAL: PerProfile<u64> = PerProfile::new(64 * MIB, 384 * MIB, 4096 * MIB, 8192 * MIB);

/// Each reader's file in whole MiB, for every block it may read at `block_ns` with the
/// margin, cut down together to fit `room`; and whether they were cut.
fn file_sizes(p: Profile, block_ns: f64, room: u64) -> (Vec<u64>, bool) {
    let ((dur, rounds), ps) = (ROUND.get(p), counts(p));
    let per_round = dur.as_nanos() as f64 / block_ns * MARGIN * BLOCK as f64;
    // Reader j reads in every round of every P above j.
    let want: Vec<u64> = (0..PMAX.get(p))
        .map(|j| (ps.iter().filter(|&&n| n > j).count() * rounds) as f64 * per_round)
        .map(|b| (b.max(MIB as f64) as u64).div_ceil(MIB) * MIB)
        .collect();
    let total: u64 = want.iter().sum();
    if total <= room {
        return (want, false);
    }
    let scale = room as f64 / total as f64;
    let cut = want
        .iter()
        .map(|&b| ((b as f64 * scale) as u64 / MIB).max(1) * MIB)
        .collect();
    (cut, true)
}

fn sizing(ctx: &Context, room: u64) -> (Vec<u64>, String) {
    let room = room.min(MAX_TOTAL.get(ctx.profile));
    // The faster of fs.read's uncached medians (a reader's mean is no lower).
    let measured = ["uncached_seq", "uncached_random"].iter().filter_map(|&n| {
        let v = ctx.earlier.metric("fs.read", n)?.summary.median;
        let basis = format!("{} per block measured by fs.read {n} (median)", fmt_ns(v));
        (v.is_finite() && v > 0.0).then_some((v, basis))
    });
    let (block_ns, basis) = measured.min_by(|a, b| a.0.total_cmp(&b.0)).unwrap_or_else(|| {
        let ns = fmt_ns(FALLBACK_BLOCK_NS);
        (FALLBACK_BLOCK_NS, format!("{ns} per block assumed: fs.read's uncached per-block time was not measured in this run (or its result was not ok), so a faster device reads blocks again"))
    });
    let (sizes, cut) = file_sizes(ctx.profile, block_ns, room);
    let [first, last, all] =
        [sizes[0], sizes[sizes.len() - 1], sizes.iter().sum()].map(|b| fmt_bytes(b as f64));
    let n = sizes.len();
    let mut note = format!(
        "reader files sized for every block a reader may read in its rounds at {basis} ({MARGIN}x margin): {first} (reader 1) down to {last} (reader {n}), {all} in all"
    );
    if cut {
        let room = fmt_bytes(room as f64);
        note.push_str(&format!("; cut down to fit {room} (the profile's limit or the scratch space left), so blocks may be read again"));
    }
    (sizes, note)
}

#[cfg(test)]
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

use crate::analysis::fit;

const SPEC: Spec = Spec {
    id: "fs.contention",
    title: "Per-block read time with P processes reading at once",
    description: "P = 1..Pmax processes each reading its own file uncached, released together; per-block time vs P and a fitted model",
    method: crate::method!("fs.contention"),
    needs: Needs {
        disk_bytes: MAX_TOTAL.get(Profile::Quick),
        ..Needs::NONE
    },
    // The device shared by the readers.
    ..Spec::DEVICE
};

impl Experiment for Contention {
    fn spec(&self) -> &Spec {
        &SPEC
    }
    fn budget(&self, p: Profile) -> Duration {
        let (d, r) = ROUND.get(p);
        let n = counts(p).len() as u32;
        // Rounds plus fork/teardown, and writing the files at 400 MB/s.
        (d + Duration::from_millis(30)) * r as u32 * n
            + Duration::from_secs_f64(MAX_TOTAL.get(p) as f64 / 400e6)
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        let mut p = Predictions::new(ctx);
        // Readers report a mean: compare with fs.read's mean (latency has a long tail).
        let seq = ctx.earlier.metric("fs.read", "uncached_seq");
        let none = ", and a device's read latency has no published figure in the parts table";
        let median = p.earlier("fs.read", &["uncached_seq"]);
        let why = median
            .why_missing()
            .map_or(String::new(), |w| format!("{w}{none}"));
        let src = "measured: fs.read uncached_seq (mean)";
        let t1 = Input::measured("t1", seq.map(|m| m.summary.mean), "ns", src, why);
        // The readers never read ahead: fs.read's sequential pass read so only with O_DIRECT.
        let readahead = "fs.read's sequential pass read with readahead (no O_DIRECT here) and \
                         the readers read without it (random advice), so its figure is not theirs";
        let same = "t1: one process alone reads as fs.read's sequential pass did (4 KiB blocks \
                    in order through O_DIRECT, no readahead)";
        match seq.filter(|m| !m.description.contains(super::read::DIRECT)) {
            Some(_) => p.withhold(&["per_block_p1"], readahead),
            None => p.same("per_block_p1", &t1, same),
        }
        let src = "method: the profile's Pmax, always measured last";
        let pmax = Input::method("P", PMAX.get(ctx.profile) as f64, "processes", src);
        let queue = "P x t1: the device serves one request at a time, so each reader waits for the other P-1";
        p.state("per_block_pmax", &[&t1, &pmax], |v| {
            Prediction::new(v[1] * v[0], queue)
        });
        let slope = "t1 per added process (one device queue)";
        p.equal("model_slope", &t1, slope);
        let zero = "the one-queue model (P x t1) passes through zero at P = 0, and a ratio to \
                    zero means nothing";
        p.withhold(&["model_intercept"], zero);
        let no_bend = "the one-queue model (P x t1) has no breakpoint";
        p.withhold(&["model_breakpoint", "model_slope_after"], no_bend);
        p.done()
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        // Tests run experiments on parallel threads: readers forked by one run would hold
        // copies of another run's barrier pipes, and the two would wait on each other.
        #[cfg(test)]
        let _one_at_a_time = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let pm = PMAX.get(ctx.profile);
        let (scratch, mut out) = match super::on_disk(ctx, pm as u64 * MIB)? {
            Ok(x) => x,
            Err(reason) => return Ok(Outcome::skipped(reason)),
        };
        let (sizes, sizing_note) = sizing(ctx, scratch.remaining());
        let sizes = match crate::experiments::seams::get().small_files {
            Some(b) => vec![b; pm],
            None => sizes,
        };
        out.notes.push(sizing_note);
        let mut rd = Readers::new(ctx, scratch, &sizes)?;
        let (dur, rounds) = ROUND.get(ctx.profile);
        let started = ctx.harness(1).stopwatch();
        let (ps, mut skipped) = (counts(ctx.profile), Vec::new());
        for (i, &p) in ps.iter().enumerate() {
            // Past the budget only Pmax is still measured: per_block_pmax is predicted there.
            if i + 1 < ps.len() && rd.per_p.len() >= 2 && started.elapsed() > ctx.budget * 2 {
                skipped.push(p.to_string());
                continue;
            }
            rd.measure(p)?;
        }
        if !skipped.is_empty() {
            out.notes.push(format!(
                "P = {} not measured: the time budget ran out (the machine is slow or busy)",
                skipped.join(", ")
            ));
        }
        if let Some(&(p, _)) = rd.per_p.last() {
            out.notes
                .extend(sharing_note(&ctx.machine.topology, &rd.order, p));
        }
        rd.checks(&mut out, dur);
        report(ctx, &mut out, &rd);
        let (all, ms) = (fmt_bytes(sizes.iter().sum::<u64>() as f64), dur.as_millis());
        let note = format!("{pm} files ({all} in all); {rounds} round(s) of {ms} ms per P");
        out.notes.push(note);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_take_cores_first_and_say_when_they_share() {
        use crate::machine::{facts::FactRoot, Machine};
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/machines/xeon-two-socket");
        let t = Machine::gather_from(&FactRoot::recorded(dir)).topology;
        let cpus = reader_order(&t, 1, &t.allowed);
        assert_eq!(
            &cpus[..2],
            [1, 2],
            "readers 0 and 1 on two cores, not SMT siblings"
        );
        assert_eq!(sharing_note(&t, &cpus, 16), None);
        let n = sharing_note(&t, &cpus, 17).unwrap();
        assert!(n.contains("SMT siblings") && n.contains("own CPU"), "{n}");
        let n = sharing_note(&t, &cpus, 40).unwrap();
        assert!(n.contains("shared CPUs from P = 33"), "{n}");
        // This machine's shape: two CPUs, no topology; P = 6 shares, P = 2 does not.
        let none = crate::machine::Topology::default();
        let cpus = reader_order(&none, 1, &[0, 1]);
        assert_eq!(cpus, [1, 0]);
        assert_eq!(sharing_note(&none, &cpus, 2), None);
        assert!(sharing_note(&none, &cpus, 6)
            .unwrap()
            .contains("6 readers on 2 CPUs"));
    }

    #[test]
    fn release_check_fails_on_a_late_reader() {
        let round = 150_000_000;
        assert!(release_check(&[(1, 0), (4, 200_000)], round).passed);
        // One reader started 20 ms after the others in a 150 ms round.
        let c = release_check(&[(1, 0), (4, 20_000_000)], round);
        assert!(!c.passed, "{}", c.detail);
        assert!(c.premise);
        assert!(!release_check(&[], round).passed);
    }

    #[test]
    fn overlap_is_bounded_by_p_and_cpus_and_withheld_after_a_failed_check() {
        // 3 readers on 2 CPUs: the figure comes from P = 2, the P = 3 point is flagged.
        let m = [(1.0, 100.0), (2.0, 120.0), (3.0, 200.0)];
        let t = overlap_text(&m, 2, false, None);
        assert!(
            t.contains("device serves about 1.7 of their 2") && t.contains("share the 2 CPUs"),
            "{t}"
        );
        // In a VM the overlap is the host's, and the sentence says it may not be the device.
        let t = overlap_text(&m, 2, true, None);
        assert!(
            t.contains("host serves about 1.7") && t.contains("not its device"),
            "{t}"
        );
        // Faster per block with more readers: not a device overlap (the 4.8 with 3 readers);
        // a cache is one cause, a device or clock faster under load another.
        let t = overlap_text(&[(1.0, 100.0), (2.0, 60.0), (3.0, 62.5)], 4, false, None);
        assert!(
            t.contains("a cache served some")
                && t.contains("faster under load")
                && !t.contains("about"),
            "{t}"
        );
        let t = overlap_text(&m, 4, false, Some("each block read at most once"));
        assert!(
            t.contains("No overlap") && t.contains("at most once"),
            "{t}"
        );
        assert!(overlap_text(&m, 1, false, None).contains("No overlap"));
    }

    #[test]
    fn fit_finds_a_bend() {
        // Flat up to 4, then 100 per process.
        let pts: Vec<(f64, f64)> = (1..=12)
            .map(|p| {
                let p = p as f64;
                (p, 1000.0 + if p > 4.0 { 100.0 * (p - 4.0) } else { 0.0 })
            })
            .collect();
        let m = fit(&pts).unwrap();
        let (b, s2) = m.bend.expect("bent");
        assert!((b - 4.0).abs() < 1e-9, "{m:?}");
        assert!(m.slope.abs() < 1e-6 && (s2 - 100.0).abs() < 1e-6, "{m:?}");
    }

    #[test]
    fn fit_keeps_a_line_for_linear_data() {
        let pts: Vec<(f64, f64)> = (1..=10)
            .map(|p| (p as f64, 50.0 + 7.0 * p as f64))
            .collect();
        let m = fit(&pts).unwrap();
        assert!(m.bend.is_none());
        assert!((m.slope - 7.0).abs() < 1e-9);
    }

    /// Files hold every block a reader may read at the measured pace (reader 1 reads in
    /// every round), and are cut down together to fit the room.
    #[test]
    fn files_are_sized_from_the_block_time_and_cut_to_fit() {
        let (sizes, cut) = file_sizes(Profile::Quick, 28_000.0, u64::MAX);
        assert!(!cut);
        assert_eq!(sizes.len(), PMAX.get(Profile::Quick));
        let (dur, rounds) = ROUND.get(Profile::Quick);
        let reader1 = counts(Profile::Quick).len() * rounds;
        let blocks = reader1 as f64 * dur.as_nanos() as f64 / 28_000.0;
        assert!(sizes[0] as f64 >= blocks * BLOCK as f64, "{sizes:?}");
        assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "{sizes:?}");
        assert!(sizes.iter().all(|b| b % MIB == 0));
        // 100 us a block needs about a quarter of that.
        let (slow, _) = file_sizes(Profile::Quick, 100_000.0, u64::MAX);
        assert!(slow[0] * 3 < sizes[0], "{slow:?} {sizes:?}");
        let room = 300 * MIB;
        let (small, cut) = file_sizes(Profile::Quick, 28_000.0, room);
        assert!(cut);
        assert!(small.iter().sum::<u64>() <= room, "{small:?}");
        assert!(small.iter().all(|&b| b >= MIB));
    }

    /// As wired: the sizes come from fs.read's uncached per-block time measured earlier in
    /// the run (1 ms a block: 1 MiB files), and the note says so; without it, the fallback.
    #[test]
    fn sizing_reads_fs_read_from_earlier_in_the_run() {
        use crate::experiments::testing::World;
        let clock = crate::clock::CoarseClock::new(1e9);
        let mut w = World::live(&clock);
        let mut o = Outcome::default();
        o.metric("uncached_seq", "ns", "", vec![1e6; 20]);
        o.metric("uncached_random", "ns", "", vec![2e6; 20]);
        w.earlier
            .push(crate::experiments::testing::recorded("fs.read", o));
        let r = w.run(&Contention);
        if r.status == crate::results::Status::Skipped {
            return crate::experiments::testing::skip(
                "sizing_reads_fs_read_from_earlier_in_the_run",
                &format!("{:?}", r.reason),
            );
        }
        let note = r.notes.iter().find(|n| n.starts_with("reader files sized"));
        let note = note.unwrap_or_else(|| panic!("{:?}", r.notes));
        assert!(
            note.contains("1.00 ms per block measured by fs.read uncached_seq (median)")
                && note.contains("1.0 MiB (reader 1)"),
            "{note}"
        );
        let r = World::live(&clock).run(&Contention);
        assert!(
            r.notes
                .iter()
                .any(|n| n.starts_with("reader files sized") && n.contains("assumed")),
            "{:?}",
            r.notes
        );
    }

    /// Review §3 #9: per_block_pmax is predicted at the profile's Pmax, so a run the budget
    /// cuts still measures Pmax (before, it stopped at P = 2 beside a P = 3 prediction).
    #[test]
    fn pmax_is_measured_where_it_is_predicted() {
        use crate::experiments::testing::{skip, World};
        let clock = crate::clock::CoarseClock::new(1e9);
        let mut w = World::live(&clock);
        w.budget = Duration::from_millis(1);
        let r = w.run(&Contention);
        if r.status == crate::results::Status::Skipped {
            return skip(
                "pmax_is_measured_where_it_is_predicted",
                &format!("{:?}", r.reason),
            );
        }
        let pmax = PMAX.get(Profile::Smoke);
        let m = r.metric("per_block_pmax").expect("per_block_pmax");
        assert!(
            m.description.contains(&format!("P = {pmax} processes")),
            "{}",
            m.description
        );
    }

    /// Review §3 #9: per_block_p1 is fs.read's figure measured again, a consistency check,
    /// and only where fs.read read as the readers do (O_DIRECT, no readahead).
    #[test]
    fn one_reader_is_checked_against_fs_read_read_the_same_way() {
        use crate::experiments::testing::{recorded, World};
        let clock = crate::clock::CoarseClock::new(1e9);
        for (how, same) in [
            ("uncached through O_DIRECT", true),
            ("with readahead", false),
        ] {
            let mut w = World::live(&clock);
            let mut o = Outcome::default();
            o.metric(
                "uncached_seq",
                "ns",
                &format!("time per 4 KiB read, {how}"),
                vec![1e5; 9],
            );
            w.earlier.push(recorded("fs.read", o));
            let p = w.with_ctx(|ctx| Contention.predict(ctx));
            let (_, p1) = p.iter().find(|(n, _)| n == "per_block_p1").unwrap();
            if same {
                assert!(p1.consistency && p1.withheld.is_none(), "{p1:?}");
            } else {
                let why = p1.withheld.as_deref().unwrap_or("");
                assert!(why.contains("readahead"), "{p1:?}");
            }
        }
    }

    #[test]
    fn process_counts_cover_the_range() {
        for p in Profile::ALL {
            let c = counts(p);
            assert_eq!(c[0], 1);
            assert_eq!(*c.last().unwrap(), PMAX.get(p));
            assert!(c.windows(2).all(|w| w[0] < w[1]));
        }
        assert_eq!(PMAX.get(Profile::Thorough), 50);
    }
}
