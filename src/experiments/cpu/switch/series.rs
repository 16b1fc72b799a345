//! cpu.process-switch's switch cost against working set.

use super::*;

/// One point of the working-set series: W bytes, and this run's switch figure at W.
pub(super) type WsPoint = (f64, SwitchFigure);

/// Switch cost vs working set (lmbench lat_ctx -s), this run's alone (not metrics).
pub(super) fn working_set_series(
    kind: Kind,
    ctx: &Context,
    h: &Harness,
    sizes: &[usize],
    out: &mut Outcome,
) -> anyhow::Result<Vec<WsPoint>> {
    let mut pts = Vec::new();
    for &w in sizes {
        if w == 0 {
            let raw = |name| out.get(name).map_or(&[][..], |m| &m.raw[..]);
            pts.push(ws_point(
                0.0,
                raw("pipe_round_trip_same_cpu"),
                raw("pipe_cost"),
            ));
            continue;
        }
        (ctx.progress)(&format!("working set {}", fmt_bytes(w as f64)));
        let (noun, cpu, ws) = (kind.noun(), ctx.cpu, fmt_bytes(w as f64));
        let check = format!("both {noun} ran on CPU {cpu} (working set {ws})");
        let t = round_trips(ctx, h, kind, (cpu, w), &check, out)?;
        let ovh = pipe_cost(h, w)?;
        pts.push(ws_point(w as f64, &t.per_op_ns, &ovh.per_op_ns));
    }
    let points = pts.iter().map(|(w, f)| [*w, f.median]).collect();
    out.plot("switch cost vs working set", "bytes", "ns", points);
    Ok(pts)
}

/// The switch figure at `bytes` from this run's round trips and overheads alone.
pub(super) fn ws_point(bytes: f64, rt: &[f64], ovh: &[f64]) -> WsPoint {
    let mut o = Outcome::default();
    o.metric("round_trip", "ns", "", rt.to_vec());
    o.metric("overhead", "ns", "", ovh.to_vec());
    (bytes, switch_metric(&mut o, "round_trip", "overhead"))
}

/// The series' largest working set against its empty switch; "more" only beyond both
/// intervals, and no cause claimed (the ping-pong touches 2W, the overhead W).
pub(super) fn series_finding(pts: &[WsPoint], ctx: &Context, out: &mut Outcome) {
    let (Some(&(w0, first)), Some(&(w, last))) = (pts.first(), pts.last()) else {
        return;
    };
    if w <= 0.0 || w0 != 0.0 {
        return;
    }
    let (k, of) = (ctx.repetition.index + 1, ctx.repetition.of);
    let which = match of {
        1 => "W".to_string(),
        _ => format!("In run {k} of {of} (the series shown), w"),
    };
    let clause = match separation_of(last.interval, first.interval) {
        Separation::Above => format!(
            "{} more per switch beyond both 95% intervals; the two tasks together touch twice what the subtracted overhead touches ({}); whether the rest is cache misses is not counted here",
            fmt_ns(last.median - first.median),
            fmt_bytes(2.0 * w)
        ),
        Separation::Overlap => {
            "within noise of each other (the 95% intervals overlap)".to_string()
        }
        Separation::Below => {
            "less beyond both 95% intervals, which touching more memory should not give: treat the series with care".to_string()
        }
    };
    let (ws, at, none) = (fmt_bytes(w), fmt_ns(last.median), fmt_ns(first.median));
    let k = last.median / first.median;
    out.finding(
        format!("{which}ith {ws} of private data per process a switch costs {at} against {none} with none ({k:.2}x): {clause}."),
        &["switch"],
    );
}
