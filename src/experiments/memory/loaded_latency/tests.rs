use super::kernel::{LoadStream, LoadedPoint, Sweep};
use super::predict::{mix_bandwidth, outstanding, team_figures};
use super::text::{idle_check, knee, Agreement, SAME_CHASE};
use super::*;
use crate::experiments::kit::place::Place;
use crate::experiments::kit::team::Step;

#[test]
fn knee_is_the_last_point_near_idle() {
    let pts = [(1e9, 100.0), (5e9, 110.0), (9e9, 119.0), (1.2e10, 180.0)];
    assert_eq!(knee(100.0, &pts), Some(2));
    assert_eq!(knee(100.0, &[(1e9, 150.0)]), None);
    // Order by bandwidth, not by position.
    let pts = [(1.2e10, 180.0), (1e9, 100.0)];
    assert_eq!(knee(100.0, &pts), Some(1));
}

#[test]
fn littles_law() {
    // 10 GB/s of 64-byte lines at 100 ns: 15.6 lines in flight.
    let v = outstanding(10e9, 64, 100.0);
    assert!((v - 15.625).abs() < 1e-9, "{v}");
}

/// The load threads' step: their spans, each on its CPU at three looks.
fn load(spans: &[(u64, u64)]) -> Step {
    let place = Place {
        looks: 3,
        ..Place::new(1)
    };
    Step {
        stamps: spans.to_vec(),
        quiet: true,
        places: vec![place; spans.len()],
    }
}

#[test]
fn concurrency_premise_fails_when_a_load_thread_misses_the_window() {
    let mut p = LoadedPoint {
        gap: Some(0.0),
        window: (100, 200),
        load: load(&[(50, 250), (60, 220)]),
        trials: 8,
        ..Default::default()
    };
    assert_eq!(p.concurrency_failure(&[0, 1]), None);
    p.load.stamps[1] = (120, 220);
    assert!(p.concurrency_failure(&[0, 1]).unwrap().contains("CPU 1"));
    p.load.stamps[1] = (60, 150);
    assert!(p.concurrency_failure(&[0, 1]).is_some());
    p.load.stamps[1] = (60, 220);
    p.load.places[1].away = 1;
    assert!(p
        .concurrency_failure(&[0, 1])
        .unwrap()
        .contains("elsewhere"));
    p.load.places[1].away = 0;
    p.stalled = 3;
    assert_eq!(p.concurrency_failure(&[0, 1]), None, "some trials kept");
    p.trials = 0;
    assert!(p.concurrency_failure(&[0, 1]).unwrap().contains("no trial"));
    // Idle points have no load to check.
    let idle = LoadedPoint::default();
    assert_eq!(idle.concurrency_failure(&[0]), None);
}

#[test]
fn idle_premise_fails_when_the_chase_hits_a_cache() {
    let s = |v: &[f64]| crate::stats::Summary::of(v).unwrap();
    let dram = s(&[150.0, 152.0, 149.0, 151.0, 150.0]);
    assert!(idle_check(&s(&[160.0, 162.0, 158.0, 161.0, 159.0]), &dram, "dram_thp").passed);
    // 40 ns: the chase found its lines in the last-level cache.
    let c = idle_check(&s(&[40.0, 41.0, 39.0, 40.5, 40.0]), &dram, "dram_thp");
    assert!(!c.passed && c.premise, "{}", c.detail);
    assert!(c.detail.contains("dram_thp"), "{}", c.detail);
}

/// The generator's kernel over `lines` lines of `words` words each (all ones), from
/// line 0: (lines written, words read into the accumulators, position after).
fn stream(traffic: Traffic, words: usize, lines: usize, steps: u64) -> (usize, u64, usize) {
    let mut part = vec![1u64; words * lines];
    let clock = crate::clock::MockClock::new(1);
    let mut s = LoadStream {
        clock: &clock,
        part: &mut part,
        words,
        pos: 0,
        acc: [0; 8],
    };
    for n in 0..steps {
        s.step(n, traffic);
    }
    let (pos, acc) = (s.pos, s.acc);
    let written = part
        .chunks_exact(words)
        .filter(|l| l.iter().all(|&w| w == STORED))
        .count();
    // No line half written: each is all stored or all as it was.
    assert!(part
        .chunks_exact(words)
        .all(|l| l.iter().all(|&w| w == STORED) || l.iter().all(|&w| w == 1)));
    (written, acc.iter().sum(), pos)
}

#[test]
fn the_mix_writes_one_line_in_three_and_reads_the_others() {
    for words in [8, 16, 4] {
        // 30 lines: ten written, twenty read whole, back at the start.
        let (w, r, pos) = stream(Traffic::Mix, words, 30, 30);
        assert_eq!(
            (w, r, pos),
            (10, 20 * words as u64, 0),
            "{words} words a line"
        );
        let (w, r, pos) = stream(Traffic::Read, words, 30, 30);
        assert_eq!(
            (w, r, pos),
            (0, 30 * words as u64, 0),
            "{words} words a line"
        );
    }
    // Which lines: the third of every three, counted across a wrap of the part.
    let mix: Vec<bool> = (0..9).map(|n| Traffic::Mix.writes(n)).collect();
    assert_eq!(mix.iter().filter(|&&w| w).count(), 3);
    assert_eq!(&mix[..3], &[false, false, true]);
    assert!((0..9).all(|n| !Traffic::Read.writes(n)));
    // A part that is not a multiple of three lines still writes one line in three.
    let writes = (0..3000).filter(|&n| Traffic::Mix.writes(n)).count();
    assert_eq!(writes, 1000);
    let (_, _, pos) = stream(Traffic::Mix, 8, 7, 9);
    assert_eq!(pos, 2 * 8, "wrapped after the seventh line");
}

#[test]
fn bytes_counted_per_line() {
    // Memory moves 4 lines for 3 counted in the mix: a write is an RFO read and a
    // write-back.
    assert_eq!(Traffic::Read.memory_per_counted(), 1.0);
    assert!((Traffic::Mix.memory_per_counted() - 4.0 / 3.0).abs() < 1e-12);
    assert_eq!(Traffic::Read.suffix(), "");
    assert_eq!(Traffic::Mix.suffix(), "_mix");
}

#[test]
fn mix_prediction_adds_time_per_line() {
    assert!((mix_bandwidth(10e9, 10e9) - 10e9).abs() < 1.0);
    // Two lines at 18 GB/s and one at 12 GB/s: 3 / (2/18 + 1/12) = 15.43 GB/s.
    let v = mix_bandwidth(18e9, 12e9);
    assert!((v - 3.0 / (2.0 / 18e9 + 1.0 / 12e9)).abs() < 1.0, "{v}");
    assert!(v < 18e9 && v > 12e9);
}

#[test]
fn the_peak_is_predicted_by_the_same_number_of_threads() {
    assert_eq!(team_figures("read", 2, true), ["read_thp_1t", "read_1t"]);
    assert_eq!(team_figures("read", 2, false), ["read_1t"]);
    assert_eq!(team_figures("write", 2, false), ["write_1t"]);
    // Seven load threads: read_7t, else the all-thread read where 7 was not measured.
    assert_eq!(team_figures("read", 8, true), ["read_7t", "read_8t"]);
    assert_eq!(team_figures("read", 1, false), ["read_1t"]);
}

/// mem.bandwidth's figures, as earlier results.
struct Bandwidth(Vec<crate::results::Metric>);

impl crate::experiments::EarlierResults for Bandwidth {
    fn metric(&self, experiment: &str, metric: &str) -> Option<&crate::results::Metric> {
        if experiment != "mem.bandwidth" {
            return None;
        }
        self.0.iter().find(|m| m.name == metric)
    }
}

fn point(gap: Option<f64>, traffic: Traffic, bw: f64, lat: f64) -> LoadedPoint {
    let wobble = [1.0, 1.01, 0.99, 1.005, 0.995];
    LoadedPoint {
        gap,
        traffic,
        latency: wobble.iter().map(|w| lat * w).collect(),
        bandwidth: wobble.iter().map(|w| bw * w).collect(),
        trials: 5,
        load: load(if gap.is_some() { &[(1, 100)] } else { &[] }),
        window: (10, 90),
        ..Default::default()
    }
}

/// A sweep of both traffics through `report`, on a 2-CPU machine whose mem.bandwidth
/// measured the one-thread read and write: the metrics, series and predictions by name.
#[test]
fn both_curves_report_their_metrics_by_name() {
    let mut m = crate::machine::Machine::default();
    m.cpu.allowed_cpus = vec![0, 1];
    m.memory.thp_enabled = Some("never".into());
    let mut bw = Outcome::default();
    bw.metric("read_1t", "bytes/s", "", vec![18e9; 5]);
    bw.metric("write_1t", "bytes/s", "", vec![12e9; 5]);
    let earlier = Bandwidth(bw.metrics);
    let clock = crate::clock::detect(None).0;
    let scratch = std::sync::OnceLock::new();
    let ctx = Context {
        profile: Profile::Quick,
        machine: &m,
        clock: &clock,
        cpu: 1,
        budget: Duration::from_millis(100),
        earlier: &earlier,
        options: &Default::default(),
        loop_ticks: 0.0,
        progress: &|_| {},
        scratch_cell: &scratch,
        repetition: crate::experiments::Repetition::SINGLE,
    };
    let sw = Sweep {
        idle: point(None, Traffic::Read, 0.4e9, 100.0),
        curves: [
            vec![
                point(Some(2000.0), Traffic::Read, 1e9, 105.0),
                point(Some(0.0), Traffic::Read, 15e9, 150.0),
            ],
            vec![
                point(Some(2000.0), Traffic::Mix, 1e9, 108.0),
                point(Some(0.0), Traffic::Mix, 12e9, 160.0),
            ],
        ],
        ..Default::default()
    };
    let buffer = || Buffer {
        region: Region::new(4096, Pages::Base).unwrap(),
        huge: false,
        text: "base pages".into(),
    };
    let report = |ctx: &Context, out: &mut Outcome| {
        let cfg = HarnessConfig::default();
        let (quiet_cfg, sw) = (cfg.clone(), sw.clone());
        let (line, loaders, reference) = (64, vec![0], None);
        let (chase, loads) = (buffer(), buffer());
        Run {
            ctx,
            gaps: &[],
            cfg,
            quiet_cfg,
            line,
            loaders,
            chase,
            reference,
            loads,
            sw,
        }
        .write(out)
    };
    let mut out = Outcome::default();
    report(&ctx, &mut out);
    let names: Vec<&str> = out.metrics.iter().map(|m| m.name.as_str()).collect();
    for want in [
        "idle_latency",
        "loaded_latency",
        "peak_bandwidth",
        "loaded_outstanding_misses",
        "knee_bandwidth",
        "loaded_latency_mix",
        "peak_bandwidth_mix",
        "loaded_outstanding_misses_mix",
        "knee_bandwidth_mix",
    ] {
        assert!(names.contains(&want), "{want} not in {names:?}");
    }
    assert_eq!(names.len(), 9, "{names:?}");
    let series: Vec<&str> = out.series.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        series,
        [
            "latency_vs_bandwidth",
            "outstanding_misses_vs_bandwidth",
            "mix_latency_vs_bandwidth",
            "mix_outstanding_misses_vs_bandwidth"
        ]
    );
    // Both curves start at the shared idle point and end unthrottled.
    assert_eq!(out.series[2].points.len(), 3);
    assert_eq!(out.series[0].points[0], out.series[2].points[0]);
    let peak = out.metrics.iter().find(|m| m.name == "peak_bandwidth_mix");
    assert!((peak.unwrap().summary.median - 12e9).abs() < 1e6);
    // Every finding names metrics the experiment reports.
    for f in &out.findings {
        for r in &f.from {
            let metric = r.rsplit('/').next().unwrap_or(r);
            assert!(names.contains(&metric), "{r} in {:?}", f.text);
        }
    }
    let mix = out
        .findings
        .iter()
        .find(|f| f.text.starts_with("Under a 2 reads : 1 write"));
    let mix = mix.expect("a finding for the mix");
    assert!(
        mix.text.contains("counting each written line once"),
        "{}",
        mix.text
    );
    assert!(mix.text.contains("read_1t and write_1t"), "{}", mix.text);
    // Predictions: the one-thread read, and the mix of the one-thread read and write.
    let p = LoadedLatency.predict(&ctx);
    let get = |n: &str| p.iter().find(|(m, _)| m == n).map(|(_, p)| p.value);
    assert_eq!(get("peak_bandwidth"), Some(18e9));
    assert_eq!(get("peak_bandwidth_mix"), Some(mix_bandwidth(18e9, 12e9)));
    // No non-temporal figure, so no evidence of reads for ownership: none is claimed.
    let ownership = |out: &Outcome| {
        let mix = out.findings.iter().find(|f| f.text.starts_with("Under a"));
        mix.is_some_and(|f| f.text.contains("ownership"))
    };
    assert!(!ownership(&out), "{:?}", out.findings);
    // Non-temporal stores above ordinary ones, and those below reads: the claim is made.
    let mut more = earlier.0.clone();
    let mut nt = Outcome::default();
    nt.metric("write_nt_1t", "bytes/s", "", vec![20e9; 5]);
    more.extend(nt.metrics);
    let shown = Bandwidth(more);
    let ctx = Context {
        earlier: &shown,
        ..ctx
    };
    let mut out = Outcome::default();
    report(&ctx, &mut out);
    assert!(ownership(&out), "{:?}", out.findings);
}

/// The experiment as the runner wires it, here (smoke: 64 MiB buffers): the mix's
/// metrics come out beside the reads', with bandwidths a memory system can move.
#[test]
fn the_mix_is_measured_on_this_machine() {
    if crate::platform::allowed_cpus().len() < 2 {
        return crate::experiments::testing::skip(
            "the_mix_is_measured_on_this_machine",
            "one CPU allowed: no core to load memory beside the chase",
        );
    }
    let clock = crate::clock::detect(None).0;
    let w = crate::experiments::testing::World::live(&clock);
    let r = w.run(&LoadedLatency);
    // Measured: ok, or invalid when a premise failed on a busy machine (the figures
    // are still reported), never skipped or failed.
    use crate::results::Status;
    assert!(
        matches!(r.status, Status::Ok | Status::Invalid | Status::Unverified),
        "{:?} {:?}",
        r.status,
        r.reason
    );
    for t in [Traffic::Read, Traffic::Mix] {
        let name = format!("peak_bandwidth{}", t.suffix());
        let m = r
            .metric(&name)
            .unwrap_or_else(|| panic!("no {name}: {:?}", r.reason));
        // More than the chase alone (a line per microsecond), less than 10 TB/s, when
        // every premise held (on a machine busy with other tests a load thread may be
        // held up in every trial: then invalid, and the reason says so).
        let plausible = m.summary.median > 64e6 && m.summary.median < 1e13;
        assert!(
            plausible || (r.status == Status::Invalid && r.reason.is_some()),
            "{name} {} {:?}",
            m.summary.median,
            r.status
        );
        assert!(r.metric(&format!("loaded_latency{}", t.suffix())).is_some());
    }
}

#[test]
fn gaps_end_unthrottled() {
    for p in Profile::ALL {
        let g = GAPS.get(p);
        assert_eq!(g.last(), Some(&0.0));
        assert!(g.windows(2).all(|w| w[0] > w[1]), "{p:?}");
    }
}

/// mem.latency's and mem.bandwidth's figures, as earlier results.
struct Earlier {
    latency: Vec<crate::results::Metric>,
    bandwidth: Vec<crate::results::Metric>,
}

impl crate::experiments::EarlierResults for Earlier {
    fn metric(&self, experiment: &str, metric: &str) -> Option<&crate::results::Metric> {
        let v = match experiment {
            "mem.latency" => &self.latency,
            "mem.bandwidth" => &self.bandwidth,
            _ => return None,
        };
        v.iter().find(|m| m.name == metric)
    }
}

/// The predictions on a 2-CPU machine without huge pages, given earlier figures.
fn predicted(latency: &[(&str, f64)], bandwidth: &[(&str, f64)]) -> Vec<(String, Prediction)> {
    let figures = |v: &[(&str, f64)]| {
        let mut o = Outcome::default();
        for (n, x) in v {
            o.metric(n, "", "", vec![*x; 5]);
        }
        o.metrics
    };
    let earlier = Earlier {
        latency: figures(latency),
        bandwidth: figures(bandwidth),
    };
    let mut m = crate::machine::Machine::default();
    m.cpu.allowed_cpus = vec![0, 1];
    m.memory.thp_enabled = Some("never".into());
    let clock = crate::clock::detect(None).0;
    let scratch = std::sync::OnceLock::new();
    let ctx = Context {
        profile: Profile::Quick,
        machine: &m,
        clock: &clock,
        cpu: 1,
        budget: Duration::from_millis(100),
        earlier: &earlier,
        options: &Default::default(),
        loop_ticks: 0.0,
        progress: &|_| {},
        scratch_cell: &scratch,
        repetition: crate::experiments::Repetition::SINGLE,
    };
    LoadedLatency.predict(&ctx)
}

#[test]
fn predictions_from_the_chase_and_the_teams_bandwidths() {
    let v = predicted(&[("dram", 100.0)], &[("read_1t", 18e9), ("write_1t", 12e9)]);
    let get = |n: &str| &v.iter().find(|(m, _)| m == n).expect(n).1;
    assert_eq!(get("idle_latency").value, 100.0);
    assert_eq!(get("loaded_latency_mix").value, 100.0);
    assert_eq!(get("peak_bandwidth").value, 18e9);
    assert_eq!(get("peak_bandwidth_mix").value, mix_bandwidth(18e9, 12e9));
    let line = get("loaded_outstanding_misses").inputs["line"].value;
    assert_eq!(
        get("loaded_outstanding_misses").value,
        outstanding(18e9, line as usize, 100.0)
    );
    assert_eq!(
        get("loaded_outstanding_misses_mix").value,
        outstanding(mix_bandwidth(18e9, 12e9), line as usize, 100.0)
    );
    let mix = get("loaded_outstanding_misses_mix");
    let mut keys: Vec<&str> = mix.inputs.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["dram", "line", "read_1t", "write_1t"]);
    assert_eq!(mix.inputs["dram"].source, "measured: mem.latency dram");
    assert!(get("knee_bandwidth").withheld.is_some());
    assert_eq!(v.len(), 9);
}

#[test]
fn a_missing_figure_withholds_with_its_own_reason() {
    let v = predicted(&[], &[("read_1t", 18e9)]);
    let why = |n: &str| {
        let p = &v.iter().find(|(m, _)| m == n).expect(n).1;
        p.withheld.clone().unwrap_or_default()
    };
    assert!(why("idle_latency").contains("mem.latency's dram was not measured"));
    assert!(why("loaded_outstanding_misses").contains("mem.latency's dram"));
    assert!(why("peak_bandwidth").is_empty(), "the read was measured");
    assert!(why("peak_bandwidth_mix").contains("mem.bandwidth's write_1t was not measured"));
}

#[test]
fn agreement_is_judged_against_the_windows_noise() {
    // Two chases of one kind side by side while the host's latency drifts by a third: the
    // pairs move together, so they agree.
    let idle = [190.0, 250.0, 200.0, 240.0, 180.0, 260.0, 210.0];
    let same: Vec<f64> = idle.iter().map(|x| x * 1.04).collect();
    let a = Agreement::of(&idle, &same).unwrap();
    assert!((a.ratio - 1.0 / 1.04).abs() < 1e-9, "{a:?}");
    assert!(a.noise > 0.1, "the drift is the window's noise: {a:?}");
    assert!(a.agrees(), "{a:?}");
    // Quiet repeats: the tolerance falls to its floor, which still holds a few percent.
    let flat = [200.0, 201.0, 199.0, 200.5, 199.5];
    let a = Agreement::of(&flat, &flat.map(|x| x * 1.08)).unwrap();
    assert!(
        a.noise < 0.01 && a.tolerance == AGREE_FLOOR && a.agrees(),
        "{a:?}"
    );
    // A chase whose working set a cache holds is several times faster, whatever the noise.
    let cached = [40.0, 55.0, 42.0, 50.0, 38.0, 60.0, 45.0];
    let a = Agreement::of(&cached, &idle).unwrap();
    assert!(!a.agrees(), "{a:?}");
    assert_eq!(Agreement::of(&idle, &[]), None);
}

/// mem.loaded-latency run here (smoke) with `plant` bending its chase away from the
/// reference chase; None, after a note, where it cannot run.
fn planted(
    test: &str,
    plant: impl FnOnce(&mut crate::experiments::seams::Seams),
) -> Option<crate::results::ExperimentResult> {
    if crate::platform::allowed_cpus().len() < 2 {
        crate::experiments::testing::skip(
            test,
            "one CPU allowed: no core to load memory beside the chase",
        );
        return None;
    }
    let clock = crate::clock::detect(None).0;
    let w = crate::experiments::testing::World::live(&clock);
    crate::experiments::seams::set(plant);
    let r = w.run(&LoadedLatency);
    crate::experiments::seams::set(|s| *s = crate::experiments::seams::Seams::NONE);
    Some(r)
}

/// The planted difference in page size: the chase on base pages while the reference is on
/// huge pages, as mem.latency's dram_thp is.
#[test]
fn a_chase_on_base_pages_fails_the_same_chase_premise() {
    let test = "a_chase_on_base_pages_fails_the_same_chase_premise";
    if !kit::thp_available(&crate::machine::Machine::gather()) {
        return crate::experiments::testing::skip(
            test,
            "no transparent huge pages here: the reference is on base pages too",
        );
    }
    let Some(r) = planted(test, |s| s.chase_base_pages = true) else {
        return;
    };
    // The planted difference needs the reference on huge pages: a kernel may offer them
    // and give none (qemu-user ignores the advice), and then both chases are base pages.
    let detail = &crate::experiments::testing::check(&r, SAME_CHASE).detail;
    let backed = detail
        .split("reference chase")
        .nth(1)
        .and_then(|t| t.split("% backed").next())
        .and_then(|t| t.rsplit('(').next())
        .and_then(|n| n.trim().parse::<f64>().ok());
    if backed.is_some_and(|b| b < 50.0) {
        return crate::experiments::testing::skip(
            test,
            &format!("the reference was given no huge pages ({detail}): nothing planted to find"),
        );
    }
    crate::experiments::testing::assert_invalid_by(&r, SAME_CHASE);
    let c = crate::experiments::testing::check(&r, SAME_CHASE);
    assert!(
        c.detail
            .contains("the chase is on base pages and the reference on huge pages"),
        "{}",
        c.detail
    );
}
