//! mem.loaded-latency's metrics, series, checks, findings and notes from the sweep.

use super::kernel::LoadedPoint;
use super::predict::outstanding;
use super::{Run, Traffic, AGREE_FLOOR, AGREE_NOISE_TIMES, IDLE_AGREES, KNEE_RISE};
use super::{MIX_READS, MIX_WRITES};
use crate::analysis::{separation, Separation};
use crate::experiments::{Context, Outcome};
use crate::results::{Check, Prediction};
use crate::stats::{median, Summary};
use crate::units::{fmt_bandwidth, fmt_bytes, fmt_ns};

/// The knee: by bandwidth, the last point before one more than `KNEE_RISE` over idle.
pub(super) fn knee(idle: f64, pts: &[(f64, f64)]) -> Option<usize> {
    let mut order: Vec<usize> = (0..pts.len()).collect();
    order.sort_by(|&a, &b| pts[a].0.total_cmp(&pts[b].0));
    let near_idle = |&i: &usize| pts[i].1 <= KNEE_RISE * idle;
    order.into_iter().take_while(near_idle).last()
}

pub(super) const SAME_CHASE: &str = "the idle chase is mem.latency's chase";

/// Without a reference chase: the idle chase against mem.latency's earlier `refname`.
pub(super) fn idle_check(idle: &Summary, reference: &Summary, refname: &str) -> Check {
    let ratio = idle.median / reference.median;
    let overlap = separation(idle, reference) == Separation::Overlap;
    Check::premise(
        SAME_CHASE,
        (ratio - 1.0).abs() <= IDLE_AGREES || overlap,
        format!(
            "idle {} against mem.latency's {refname} {} measured earlier in the run ({ratio:.2}x; agreement: within 20% or overlapping 95% intervals; no reference chase was measured beside it)",
            fmt_ns(idle.median),
            fmt_ns(reference.median),
        ),
    )
}

/// How far apart the paired idle and reference chases were, and how far the noise allows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Agreement {
    /// Median over the pairs of idle / reference.
    pub(super) ratio: f64,
    /// Median relative deviation of each chase's repeats from that chase's median.
    pub(super) noise: f64,
    pub(super) tolerance: f64,
    pub(super) pairs: usize,
}

impl Agreement {
    pub(super) fn of(idle: &[f64], reference: &[f64]) -> Option<Agreement> {
        let pairs = idle.len().min(reference.len());
        if pairs == 0 {
            return None;
        }
        let ratios: Vec<f64> = idle.iter().zip(reference).map(|(i, r)| i / r).collect();
        let deviations = |v: &[f64]| {
            let m = median(v);
            v.iter().map(|x| (x / m - 1.0).abs()).collect::<Vec<f64>>()
        };
        let devs = [deviations(&idle[..pairs]), deviations(&reference[..pairs])];
        let noise = median(&devs.concat());
        Some(Agreement {
            ratio: median(&ratios),
            noise,
            tolerance: (AGREE_NOISE_TIMES * noise).max(AGREE_FLOOR),
            pairs,
        })
    }

    pub(super) fn agrees(&self) -> bool {
        (self.ratio - 1.0).abs() <= self.tolerance
    }
}

impl Run<'_, '_> {
    pub(super) fn write(&self, out: &mut Outcome) {
        let sw = &self.sw;
        out.check(self.concurrency_premise());
        self.same_chase(out);
        let (page, repeats) = (self.chase.pages(), sw.idle_repeats.len());
        let what = format!(
            "chase latency with no load thread running ({page}), {repeats} repeats between the loaded points, trials pooled; the idle point of both curves"
        );
        out.metric("idle_latency", "ns", &what, sw.idle.latency.clone());
        for traffic in Traffic::BOTH {
            TrafficCurve { r: self, traffic }.write(out);
        }
        self.notes(out);
    }

    /// The premise that the idle chase is mem.latency's: against the reference, else earlier.
    fn same_chase(&self, out: &mut Outcome) {
        let refname = self.chase.dram();
        let earlier = self.ctx.earlier.metric("mem.latency", refname);
        let idle = Summary::of(&self.sw.idle.latency);
        let pair = earlier.map(|r| &r.summary).zip(idle);
        match (self.reference_check(), pair) {
            (Some(c), pair) => {
                out.check(c);
                out.notes.extend(pair.map(|(r, s)| format!(
                    "mem.latency's {refname} earlier in the run: {} (idle is {:.2}x of it): measured minutes before, when other guests' memory traffic may have differed, so it is context here; the premise compares the reference chase of the same window",
                    fmt_ns(r.median),
                    s.median / r.median
                )));
            }
            (None, Some((r, s))) => out.check(idle_check(&s, r, refname)),
            (None, None) => out.notes.push(format!(
                "mem.latency's {refname} is not in this run and no reference chase was measured: the idle point is not compared with mem.latency's chase"
            )),
        }
    }

    /// Same page kind (by smaps: timing may not tell) and as fast within the window's noise.
    fn reference_check(&self) -> Option<Check> {
        let (sw, chase, reference) = (&self.sw, &self.chase, self.reference.as_ref()?);
        let a = Agreement::of(&sw.idle_repeats, &sw.reference_repeats)?;
        let same_pages = chase.huge == reference.huge;
        let (kind, apart) = (reference.dram(), (a.ratio - 1.0).abs() * 100.0);
        let verdict = match (same_pages, a.agrees()) {
            (true, true) => "within the noise measured".to_string(),
            (true, false) => "beyond the noise measured: the chase is not mem.latency's (its working set, or what backs it, differs)".to_string(),
            (false, _) => format!(
                "the chase is on {} and the reference on {}: not mem.latency's chase",
                chase.pages(),
                reference.pages()
            ),
        };
        Some(Check::premise(
            SAME_CHASE,
            same_pages && a.agrees(),
            format!(
                "idle {} on {} against a reference chase {} (mem.latency's {kind} chase: {} on {}, laid afresh) measured beside it {} times in the same window: {:.2}x, {apart:.1}% apart (median of the pairs' ratios); each chase's repeats moved {:.1}% (median deviation from its median), so agreement is within {:.1}% ({AGREE_NOISE_TIMES:.0}x that, at least {:.0}%): {verdict}",
                fmt_ns(median(&sw.idle_repeats)),
                chase.pages(),
                fmt_ns(median(&sw.reference_repeats)),
                fmt_bytes(chase.region.len() as f64),
                reference.text,
                a.pairs,
                a.ratio,
                a.noise * 100.0,
                a.tolerance * 100.0,
                AGREE_FLOOR * 100.0,
            ),
        ))
    }

    fn concurrency_premise(&self) -> Check {
        let sw = &self.sw;
        let loaded: Vec<&LoadedPoint> = sw.curves.iter().flatten().collect();
        let fails = loaded.iter().filter_map(|p| {
            let w = p.concurrency_failure(&self.loaders)?;
            Some(format!("{}: {w}", p.label()))
        });
        let fails: Vec<String> = fails.collect();
        let stalled: usize = loaded.iter().map(|p| p.stalled).sum();
        let trials: usize = loaded.iter().map(|p| p.trials).sum();
        let pin = crate::platform::pinning_premise_failure(&crate::platform::pin_support());
        Check::premise(
            "the load threads ran alongside the chase for every point",
            fails.is_empty() && pin.is_none(),
            match (pin, fails.is_empty()) {
                (Some(w), _) => w,
                (None, true) => format!(
                    "{} loaded points ({} read-only, {} of the read/write mix): every load thread started before the chase's first trial and stopped after its last, on its CPU at every look; {trials} trials kept with every load thread streaming, {stalled} set aside and repeated (a load thread read nothing or was held up more than 20 us in them)",
                    loaded.len(),
                    sw.curves[0].len(),
                    sw.curves[1].len()
                ),
                (None, false) => fails.join("; "),
            },
        )
    }

    fn notes(&self, out: &mut Outcome) {
        let sw = &self.sw;
        let list = |v: &[f64]| v.iter().map(|&x| fmt_ns(x)).collect::<Vec<_>>().join(", ");
        let reference = self.reference.as_ref().map_or(String::new(), |b| {
            let bytes = fmt_bytes(self.chase.region.len() as f64);
            let (text, list) = (&b.text, list(&sw.reference_repeats));
            format!("; the reference chase (laid afresh over {bytes} on {text}) beside each, in turn first: {list}")
        });
        out.notes.push(format!(
            "idle measured {} times, before the sweep and after each gap, the trials pooled: {}{reference}",
            sw.idle_repeats.len(),
            list(&sw.idle_repeats)
        ));
        let all = || std::iter::once(&sw.idle).chain(sw.curves.iter().flatten());
        let (rate, preempted) = (sw.ns_per_iter, all().map(|p| p.preempted).sum::<usize>());
        out.notes.push(format!(
            "delay loop: {rate:.2} ns per iteration (measured on the chase's CPU); {preempted} chase trials were preempted and repeated"
        ));
        for p in all() {
            out.notes
                .extend(p.notes.iter().map(|n| format!("{}: {n}", p.label())));
        }
    }
}

/// The memory's traffic with reads for ownership, only where mem.bandwidth's figures show them.
fn moved(ctx: &Context, bandwidth: f64) -> String {
    let s = |m: &str| ctx.earlier.metric("mem.bandwidth", m).map(|x| &x.summary);
    let bw = fmt_bandwidth(bandwidth);
    match (s("read_1t"), s("write_1t"), s("write_nt_1t")) {
        (Some(r), Some(w), Some(nt)) if super::super::bandwidth::rfo_shown(r, w, nt) => {
            format!(" (mem.bandwidth's stores showed reads for ownership: with them the memory moved about {bw})")
        }
        _ => String::new(),
    }
}

/// One traffic's curve: the shared idle point and its loaded points, lightest first.
struct TrafficCurve<'a> {
    r: &'a Run<'a, 'a>,
    traffic: Traffic,
}

impl TrafficCurve<'_> {
    fn write(&self, out: &mut Outcome) {
        self.series(out);
        let Some(full) = self.loaded().last() else {
            return;
        };
        let by_bandwidth =
            |a: &&LoadedPoint, b: &&LoadedPoint| a.bandwidth_bps().total_cmp(&b.bandwidth_bps());
        let peak = self.points().max_by(by_bandwidth).unwrap_or(full);
        self.metrics(out, full, peak);
        self.finding(out, full, peak);
        if self.traffic == Traffic::Read {
            self.read_shares(out, peak.bandwidth_bps());
        }
        self.knee(out, peak);
        self.points_note(out);
    }

    fn loaded(&self) -> &[LoadedPoint] {
        &self.r.sw.curves[self.traffic as usize]
    }

    fn points(&self) -> impl Iterator<Item = &LoadedPoint> {
        std::iter::once(&self.r.sw.idle).chain(self.loaded())
    }

    fn name(&self, base: &str) -> String {
        format!("{base}{}", self.traffic.suffix())
    }

    fn series(&self, out: &mut Outcome) {
        let curve = self.points().map(|p| [p.bandwidth_bps(), p.latency_ns()]);
        let curve: Vec<[f64; 2]> = curve.collect();
        let misses = |&[b, l]: &[f64; 2]| [b, outstanding(b, self.r.line, l)];
        let misses = curve.iter().map(misses).collect();
        let prefix = ["", "mix_"][self.traffic as usize];
        let name = |base: &str| format!("{prefix}{base}");
        out.plot(&name("latency_vs_bandwidth"), "bytes/s", "ns", curve);
        let misses_name = name("outstanding_misses_vs_bandwidth");
        out.plot(&misses_name, "bytes/s", "lines", misses);
    }

    fn metrics(&self, out: &mut Outcome, full: &LoadedPoint, peak: &LoadedPoint) {
        let (label, k, line) = (self.traffic.label(), self.r.loaders.len(), self.r.line);
        let page = self.r.chase.pages();
        let (what, counted) = match self.traffic {
            Traffic::Read => ("reading".to_string(), "load threads' and chase's lines"),
            Traffic::Mix => (
                format!(
                    "reading {MIX_READS} lines and writing {MIX_WRITES} of every {}",
                    MIX_READS + MIX_WRITES
                ),
                "lines the load threads read or wrote, each once, and the chase's (a written line's read for ownership, where the core does one, is not counted)",
            ),
        };
        let misses = full.bandwidth.iter().zip(&full.latency);
        let misses = misses.map(|(&b, &l)| outstanding(b, line, l)).collect();
        let (gap, n) = (fmt_ns(peak.gap.unwrap_or(0.0)), |base| self.name(base));
        let w = format!(
            "chase latency with every load thread {what} unthrottled ({k} thread(s), {page})"
        );
        out.metric(&n("loaded_latency"), "ns", &w, full.latency.clone());
        let w = format!(
            "highest bandwidth of the {label} sweep, per chase trial, at gap {gap}: {counted}"
        );
        out.metric(&n("peak_bandwidth"), "bytes/s", &w, peak.bandwidth.clone());
        let w = format!(
            "misses in flight at the unthrottled {label} point by Little's law: bandwidth / line x chase latency, per trial"
        );
        out.metric(&n("loaded_outstanding_misses"), "lines", &w, misses);
    }

    /// The curve's finding: idle against unthrottled, and the peak against its prediction.
    fn finding(&self, out: &mut Outcome, full: &LoadedPoint, peak: &LoadedPoint) {
        let predicted = super::predict::predictions(self.r.ctx);
        let (il, fl) = (self.r.sw.idle.latency_ns(), full.latency_ns());
        let side = match Summary::of(&full.latency).zip(Summary::of(&self.r.sw.idle.latency)) {
            Some((f, i)) => match separation(&f, &i) {
                Separation::Above => "above idle, 95% intervals apart",
                Separation::Below => "below idle, 95% intervals apart",
                Separation::Overlap => "within noise of idle",
            },
            None => "too few trials to compare",
        };
        let (loaded_name, peak_name) = (self.name("loaded_latency"), self.name("peak_bandwidth"));
        let stated = |(n, p): &&(String, Prediction)| *n == peak_name && p.withheld.is_none();
        let against = predicted.iter().find(stated).map_or(String::new(), |(_, p)| {
            let inputs: Vec<&str> = p.inputs.keys().map(|k| k.as_str()).collect();
            let (ratio, value) = (peak.bandwidth_bps() / p.value, fmt_bandwidth(p.value));
            let inputs = inputs.join(" and ");
            format!(" ({ratio:.2}x of {value}, predicted from mem.bandwidth's {inputs} with as many threads as load threads)")
        });
        let (k, ratio, idle, loaded) = (self.r.loaders.len(), fl / il, fmt_ns(il), fmt_ns(fl));
        let at = fmt_bandwidth(full.bandwidth_bps());
        let pk = fmt_bandwidth(peak.bandwidth_bps());
        let text = match self.traffic {
            Traffic::Read => format!(
                "Loaded latency: {idle} idle, {loaded} with {k} load thread(s) reading unthrottled ({ratio:.2}x, {side}), at {at}; peak bandwidth {pk}{against}."
            ),
            Traffic::Mix => format!(
                "Under a {} load (ordinary stores): {loaded} with {k} load thread(s) unthrottled ({ratio:.2}x idle, {side}), at {at}; peak {pk}{against}, counting each written line once{}.",
                self.traffic.label(),
                moved(self.r.ctx, peak.bandwidth_bps() * self.traffic.memory_per_counted())
            ),
        };
        out.finding_salient(text, &["idle_latency", &loaded_name, &peak_name], ratio);
    }

    /// The knee's metric and finding, or a note on why there is none.
    fn knee(&self, out: &mut Outcome, peak: &LoadedPoint) {
        let point = |p: &LoadedPoint| (p.bandwidth_bps(), p.latency_ns());
        let lp: Vec<(f64, f64)> = self.loaded().iter().map(point).collect();
        let (label, rise) = (self.traffic.label(), (KNEE_RISE - 1.0) * 100.0);
        let found = knee(self.r.sw.idle.latency_ns(), &lp);
        let Some(i) = found.filter(|&i| i + 1 < lp.len() && lp[i].0 < peak.bandwidth_bps()) else {
            let why = match found {
                Some(_) => format!(
                    "latency stayed within {rise:.0}% of idle up to the highest bandwidth reached"
                ),
                None => format!("the lightest load already raised latency by more than {rise:.0}%"),
            };
            return out.notes.push(format!("{label}: no knee: {why}"));
        };
        let (knee_name, kp) = (self.name("knee_bandwidth"), &self.loaded()[i]);
        let what = format!(
            "the highest bandwidth of the {label} sweep whose chase latency stays within {rise:.0}% of idle"
        );
        out.metric(&knee_name, "bytes/s", &what, kp.bandwidth.clone());
        let (at, there) = (fmt_bandwidth(kp.bandwidth_bps()), fmt_ns(kp.latency_ns()));
        let share = 100.0 * kp.bandwidth_bps() / peak.bandwidth_bps();
        let text = format!(
            "Knee ({label}) at {at} ({share:.0}% of the peak): latency {there} there, {} at the peak.",
            fmt_ns(peak.latency_ns())
        );
        out.finding(text, &[&knee_name, &self.name("peak_bandwidth")]);
    }

    fn points_note(&self, out: &mut Outcome) {
        let points = self.points().map(|p| {
            let (b, l) = (p.bandwidth_bps(), p.latency_ns());
            let gap = p.gap.map_or("idle".to_string(), fmt_ns);
            let misses = outstanding(b, self.r.line, l);
            format!("{gap} -> {}, {}, {misses:.1}", fmt_bandwidth(b), fmt_ns(l))
        });
        out.notes.push(format!(
            "points, {} (gap target -> bandwidth, latency, misses in flight): {}",
            self.traffic.label(),
            points.collect::<Vec<_>>().join("; ")
        ));
    }

    /// The read peak as a share of mem.bandwidth's reads of 1, N - 1 and N threads.
    fn read_shares(&self, out: &mut Outcome, peak: f64) {
        let ctx = self.r.ctx;
        let n = ctx.machine.cpu.allowed_cpus.len().max(1);
        let teams = [1, n - 1, n].into_iter().filter(|&t| t >= 1);
        let teams: std::collections::BTreeSet<String> = teams.map(|t| t.to_string()).collect();
        let share = |t: String| {
            let name = format!("read_{t}t");
            let bw = ctx.earlier_median("mem.bandwidth", &name)?;
            let (share, bw) = (100.0 * peak / bw, fmt_bandwidth(bw));
            Some(format!("{share:.0}% of mem.bandwidth's {name} ({bw})"))
        };
        let reads = std::iter::once("thp_1".to_string()).chain(teams);
        let reads: Vec<String> = reads.filter_map(share).collect();
        let (peak, k, list) = (fmt_bandwidth(peak), self.r.loaders.len(), reads.join(", "));
        let note = format!("peak bandwidth {peak} with {k} load thread(s) and the chase: {list}");
        out.notes.extend((!reads.is_empty()).then_some(note));
    }
}
