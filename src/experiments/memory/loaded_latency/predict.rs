//! mem.loaded-latency's predictions: the idle chase from mem.latency, the peaks from
//! mem.bandwidth's figures for the same team, misses in flight by Little's law.

use super::{MIX_READS, MIX_WRITES};
use crate::experiments::kit;
use crate::experiments::predict::{Input, Predictions};
use crate::experiments::Context;
use crate::results::Prediction;

/// Why the knees are not predicted.
const KNEE_UNMODELLED: &str = "where latency starts to rise depends on the memory \
    controller's queueing, which no measured primitive or table entry describes";

/// Every prediction, by metric name.
pub(super) fn predictions(ctx: &Context) -> Vec<(String, Prediction)> {
    let mut p = Predictions::new(ctx);
    let team = TeamFigures::earlier(&p);
    let (idle, idle_name) = first_of(&p, "mem.latency", team.dram());
    p.same(
        "idle_latency",
        &idle,
        format!("mem.latency's {idle_name}: the same chase, idle"),
    );
    for loaded in ["loaded_latency", "loaded_latency_mix"] {
        p.at_least(
            loaded,
            &idle,
            format!(
                "mem.latency's {idle_name}, a lower bound: a chase whose misses queue behind \
                 the load threads' is never faster than the idle one (the queueing is not in \
                 the model)"
            ),
        );
    }
    p.withhold(&["knee_bandwidth", "knee_bandwidth_mix"], KNEE_UNMODELLED);
    team.peaks(&mut p);
    team.misses(&mut p, (&idle, idle_name));
    p.done()
}

/// The peak predictions alone, for the findings that compare the peaks with them.
pub(super) fn peak_predictions(ctx: &Context) -> Vec<(String, Prediction)> {
    let mut p = Predictions::new(ctx);
    TeamFigures::earlier(&p).peaks(&mut p);
    p.done()
        .into_iter()
        .filter(|(_, pr)| pr.withheld.is_none())
        .collect()
}

/// mem.bandwidth's read, and its read and write pair, for the load threads' team.
struct TeamFigures {
    thp: bool,
    /// Load threads.
    threads: usize,
    read: (Input, String),
    mix: Result<(Input, String, Input, String), Input>,
    line: Input,
}

impl TeamFigures {
    fn earlier(p: &Predictions) -> TeamFigures {
        let ctx = p.ctx();
        let n = ctx.machine.cpu.allowed_cpus.len().max(1);
        let thp = kit::thp_available(ctx.machine);
        let reads = team_figures("read", n, thp);
        let writes = team_figures("write", n, thp);
        let (read, name) = first_of(p, "mem.bandwidth", &refs(&reads));
        let mix = reads
            .iter()
            .zip(&writes)
            .find_map(|(r, w)| {
                let ri = p.earlier("mem.bandwidth", &[r]);
                let wi = p.earlier("mem.bandwidth", &[w]);
                (ri.value().is_some() && wi.value().is_some())
                    .then(|| (ri, r.clone(), wi, w.clone()))
            })
            .ok_or_else(|| {
                let r = p.earlier("mem.bandwidth", &refs(&reads));
                match r.value() {
                    Some(_) => p.earlier("mem.bandwidth", &refs(&writes)),
                    None => r,
                }
            });
        let line = kit::line_bytes(&ctx.machine.data_caches());
        TeamFigures {
            thp,
            threads: n.saturating_sub(1).max(1),
            read: (read, name.to_string()),
            mix,
            line: Input::machine(
                "line",
                Some(line as f64),
                "bytes",
                "machine: cache line size (sysfs)",
                "the cache line size is not known",
            ),
        }
    }

    /// mem.latency's DRAM figures most like the chase's, first first.
    fn dram(&self) -> &'static [&'static str] {
        &["dram_thp", "dram"][(!self.thp) as usize..]
    }

    /// The same team's read for reads; for the mix, `mix_bandwidth` of its read and write.
    fn peaks(&self, p: &mut Predictions) {
        let k = self.threads;
        let (read, name) = &self.read;
        p.same(
            "peak_bandwidth",
            read,
            format!("mem.bandwidth's {name}: the read of as many threads as load threads ({k})"),
        );
        let Some((ri, r, wi, w)) = self.mix(p, "peak_bandwidth_mix") else {
            return;
        };
        p.state("peak_bandwidth_mix", &[ri, wi], |v| {
            Prediction::new(
                mix_bandwidth(v[0], v[1]),
                format!(
                    "3 / (2 / {r} + 1 / {w}): of every three lines two at mem.bandwidth's \
                     read rate and one at its write rate (ordinary stores, whatever \
                     they cost there), {k} thread(s)"
                ),
            )
        });
    }

    /// The mix's read and write figures, or None with `metric` withheld for want of them.
    fn mix(&self, p: &mut Predictions, metric: &str) -> Option<&(Input, String, Input, String)> {
        if let Err(missing) = &self.mix {
            p.withhold(&[metric], missing.why_missing().unwrap_or_default());
        }
        self.mix.as_ref().ok()
    }

    /// Little's law on the team's bandwidths and the idle chase (not a bound: the idle
    /// latency errs low, the unloaded bandwidth high), on the mix's counted lines.
    fn misses(&self, p: &mut Predictions, (idle, lname): (&Input, &str)) {
        let ((read, name), line) = (&self.read, &self.line);
        let law = |of: &str, bw: &str, are: &str| {
            format!(
                "Little's law{of}: {bw} x {lname} / line (the idle latency for the loaded one, \
                 which alone would make it low; but the {are} mem.bandwidth's, which the loaded \
                 team may not reach: not a bound)"
            )
        };
        let text = law("", name, "bandwidth is");
        p.state("loaded_outstanding_misses", &[read, idle, line], |v| {
            Prediction::new(v[0] / v[2] * v[1] * 1e-9, text)
        });
        let Some((ri, r, wi, w)) = self.mix(p, "loaded_outstanding_misses_mix") else {
            return;
        };
        let text = law(
            " on the counted lines",
            &format!("3 / (2 / {r} + 1 / {w})"),
            "bandwidths are",
        );
        p.state(
            "loaded_outstanding_misses_mix",
            &[ri, wi, idle, line],
            |v| Prediction::new(mix_bandwidth(v[0], v[1]) / v[3] * v[2] * 1e-9, text),
        );
    }
}

fn refs(names: &[String]) -> Vec<&str> {
    names.iter().map(String::as_str).collect()
}

/// The first of `metrics` that `experiment` measured earlier, with its name; missing
/// (named after the first) when none was.
fn first_of<'m>(p: &Predictions, experiment: &str, metrics: &[&'m str]) -> (Input, &'m str) {
    let i = p.earlier(experiment, metrics);
    let name = metrics.iter().copied().find(|m| *m == i.name());
    (i, name.unwrap_or(metrics[0]))
}

/// Misses in flight by Little's law: bandwidth / line x latency.
pub(super) fn outstanding(bandwidth: f64, line: usize, latency_ns: f64) -> f64 {
    bandwidth / line as f64 * latency_ns * 1e-9
}

/// mem.bandwidth's `op` figures for the load threads' team, most like it first: as many
/// threads (on huge pages for one, which mem.bandwidth measures only there), else all
/// threads (large machines measure powers of two and N).
pub(super) fn team_figures(op: &str, allowed: usize, thp: bool) -> Vec<String> {
    let k = allowed.saturating_sub(1).max(1);
    match (k, thp) {
        (1, true) => vec![format!("{op}_thp_1t"), format!("{op}_1t")],
        (1, false) => vec![format!("{op}_1t")],
        _ => vec![format!("{op}_{k}t"), format!("{op}_{allowed}t")],
    }
}

/// The mix's bandwidth: of every three lines two take a read's time and one a write's.
pub(super) fn mix_bandwidth(read: f64, write: f64) -> f64 {
    (MIX_READS + MIX_WRITES) as f64 / (MIX_READS as f64 / read + MIX_WRITES as f64 / write)
}
