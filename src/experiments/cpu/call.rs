//! cpu.call: procedure call cost for 0..7 integer arguments.

use crate::experiments::predict::Predictions;
use crate::experiments::{spec::ms, PerProfile, Spec};
use crate::experiments::{Context, Experiment, Outcome};
use crate::opaque::{hide, repeat};
use crate::results::{Check, Prediction};
use std::hint::black_box;

pub struct Call;

macro_rules! first {
    () => {
        0
    };
    ($a:ident $($rest:ident)*) => {
        $a
    };
}

/// `n` calls through an opaque pointer of a non-inlined callee taking one integer per `$a`;
/// it returns its first argument, so its body does not grow with arity.
macro_rules! calls {
    ($n:expr, $x:expr; $($a:ident)*) => {{
        #[inline(never)]
        #[allow(unused_variables)]
        extern "C" fn callee($($a: u64),*) -> u64 {
            first!($($a)*)
        }
        let ptr = black_box(callee as extern "C" fn($($a: u64),*) -> u64);
        $(let $a = $x;)*
        repeat($n, || ptr($($a),*))
    }};
}

fn calls(k: usize, n: u64) {
    let x = hide(1);
    match k {
        0 => calls!(n, x;),
        1 => calls!(n, x; a),
        2 => calls!(n, x; a b),
        3 => calls!(n, x; a b c),
        4 => calls!(n, x; a b c d),
        5 => calls!(n, x; a b c d e),
        6 => calls!(n, x; a b c d e f),
        _ => calls!(n, x; a b c d e f g),
    }
}

const SPEC: Spec = Spec {
    id: "cpu.call",
    title: "Procedure call cost by argument count",
    description:
        "cost of a non-inlined call with 0..7 integer arguments, and the increment per argument",
    method: crate::method!("cpu.call"),
    budget: Some(PerProfile::scaled(ms(1600))),
    // Call and return are taken branches, front-end bound like the loop.
    bottleneck: crate::results::Bottleneck::Issue,
    ..Spec::CORE_LOOP
};

impl Experiment for Call {
    fn spec(&self) -> &Spec {
        &SPEC
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        let mut p = Predictions::new(ctx);
        let args = (0..8).map(|k| format!("args_{k}")).collect::<Vec<_>>();
        p.withhold(
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
            "no figure measured before it prices a call and its return: cpu.loop's iteration is \
             bound by its one-cycle dependent decrement, not by how fast the core takes branches, \
             and the parts table names no call or return cost for any part",
        );
        p.withhold(
            &["per_argument"],
            "no model in the run prices an argument (a register move can execute alongside the \
             call or be eliminated at rename), and a ratio to zero means nothing",
        );
        p.done()
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let mut out = Outcome::default();
        let h = ctx.cpu_harness(8);
        for k in 0..8 {
            (ctx.progress)(&format!("{k} arguments"));
            let what = format!("call and return with {k} integer arguments");
            let m = h.measure(1.0, |n| calls(k, n));
            out.measured(&format!("args_{k}"), &what, &m);
        }
        // Per-argument increment: the slope of trial i over every arity, per trial.
        let n_trials = out.metrics.iter().map(|m| m.raw.len()).min().unwrap_or(0);
        let slopes: Vec<f64> = (0..n_trials)
            .filter_map(|i| {
                let arity = out.metrics.iter().enumerate();
                let pts: Vec<(f64, f64)> = arity.map(|(k, m)| (k as f64, m.raw[i])).collect();
                crate::stats::linear_fit(&pts).map(|(_, b)| b)
            })
            .collect();
        out.metric(
            "per_argument",
            "ns",
            "least-squares increment per added argument (per-trial slopes)",
            slopes,
        );
        out.pool(ctx);
        let points: Vec<[f64; 2]> = (0..8)
            .map(|k| [k as f64, out.median(&format!("args_{k}"))])
            .collect();
        let (slope, c0, c7) = (out.median("per_argument"), points[0][1], points[7][1]);
        out.plot("call cost vs arguments", "arguments", "ns", points);
        out.check(Check::sanity(
            "cost grows with arguments within noise",
            c7 >= c0 * 0.9 && slope > -0.05 * c0,
            format!("0 args {c0:.3} ns, 7 args {c7:.3} ns, slope {slope:.3} ns/arg"),
        ));
        // Arguments are said to cost more only when 7 are dearer than 0 beyond noise.
        let tail = match out.separation("args_7", "args_0") {
            crate::analysis::Separation::Above => format!(
                "; each argument adds about {} (fitted), and 7 arguments cost more than none beyond both 95% intervals",
                crate::units::fmt_ns(slope)
            ),
            crate::analysis::Separation::Overlap => {
                "; 7 arguments and none are within noise of each other (their 95% intervals overlap)".into()
            }
            crate::analysis::Separation::Below => {
                "; the 7-argument call is the cheaper one here, beyond both 95% intervals".into()
            }
        };
        let (ns0, ns7) = (crate::units::fmt_ns(c0), crate::units::fmt_ns(c7));
        out.finding(
            format!(
                "A call costs {ns0} with no arguments and {ns7} with 7 ({:.2}x){tail}.",
                c7 / c0
            ),
            &["args_0", "args_7", "per_argument"],
        );
        Ok(out)
    }
}
