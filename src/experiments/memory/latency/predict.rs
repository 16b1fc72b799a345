//! mem.latency's predictions: cache levels from the parts table at the core's clock.

use crate::experiments::parts::{self, Pick, Unit};
use crate::experiments::predict::{Input, Predictions};
use crate::experiments::Context;
use crate::results::Prediction;

/// The table's figure for `what` as input "cycles", or why it gives none: no figure, two
/// published figures that disagree, or cycles of a clock osmeter does not read.
fn cycles(ctx: &Context, what: &str, pick: Pick) -> Input {
    let (f, key) = match parts::figure(ctx.machine, what, pick) {
        Ok(found) => found,
        Err(why) => return Input::missing("cycles", why),
    };
    let stated = format!("the parts table's {what} for {key}, {} cycles", f.value);
    if let Some(other) = f.disputed {
        return Input::missing("cycles", format!("{stated}, is disputed: {other}"));
    }
    if f.unit == Unit::UncoreCycles {
        let why = format!("{stated}, counts the uncore (ring or mesh) clock, which osmeter does not read: the core clock would convert it wrongly");
        return Input::missing("cycles", why);
    }
    let what = format!("{what}, {}", f.kind.label());
    Input::table("cycles", f.value, "cycles", &what, &key, &f.reference)
}

/// The metric, the figure's name and its cell of each level the table covers.
const LEVELS: [(&str, &str, Pick); 3] = [
    ("l1d", "L1 data load-to-use latency", |c| {
        c.l1d_cycles.as_ref()
    }),
    ("l2", "L2 load-to-use latency", |c| c.l2_cycles.as_ref()),
    ("l3", "L3 load-to-use latency", |c| c.l3_cycles.as_ref()),
];

const WALKS: &str = ": a lower bound, since the levels come from the base-page curve, whose \
    page walks the table's figure leaves out";

pub(super) fn predict(ctx: &Context) -> Vec<(String, Prediction)> {
    let mut p = Predictions::new(ctx);
    let (ghz, src) = ctx.core_ghz();
    let f_core = Input::machine("f_core", Some(ghz * 1e9), "Hz", src, "");
    let huge = super::plan::huge_page_levels(ctx.machine, ctx.profile);
    for c in &ctx.machine.data_caches() {
        let Some(&(name, what, pick)) = LEVELS.get((c.level as usize).wrapping_sub(1)) else {
            let why = format!("the parts table has no level-{} cache figures", c.level);
            p.withhold(&[&format!("l{}", c.level)], &why);
            continue;
        };
        let cyc = cycles(ctx, what, pick);
        let mut at = |metric: &str, source: &str, fits: &str| {
            let size = Input::machine("size", Some(c.size_bytes as f64), "bytes", source, "");
            p.state(metric, &[&cyc, &f_core, &size], |v| {
                let f = format!("{} cycles ({what}, parts table) / f_core{fits}", v[0]);
                match metric == name && !huge {
                    true => Prediction::new(v[0] / ghz, f + WALKS).lower_bound(),
                    false => Prediction::new(v[0] / ghz, f),
                }
            });
        };
        // lmbench's 16 KiB point, four pages, fits any L1d of 16 KiB or more and any L1 TLB.
        if c.level == 1 && c.size_bytes >= 16 << 10 {
            let fits = ": 16 KiB fits the L1 data cache";
            at("lmbench_16KiB", "machine: sysfs L1 data cache size", fits);
        }
        at(name, "machine: sysfs cache size", "");
    }
    p.withhold(
        &["dram"],
        "a random chase over base pages adds a page walk per access, and the parts table \
         names no published page-walk cost",
    );
    let dram = match parts::figure(ctx.machine, "idle DRAM latency", |c| c.dram_ns.as_ref()) {
        Ok((f, key)) => Input::table("dram", f.value, "ns", f.kind.label(), &key, &f.reference),
        Err(why) => Input::missing("dram", why),
    };
    p.equal(
        "dram_thp",
        &dram,
        "published idle DRAM latency of a full random chase (parts table); huge pages keep \
         the TLB reach",
    );
    p.withhold(
        &["lmbench_1MiB", "lmbench_dram"],
        "base pages in random order add TLB misses and page walks, and the parts table names \
         no published walk cost",
    );
    p.withhold(
        &["dram_sequential"],
        "how far ahead and how fast the prefetcher fetches has no published figure per part",
    );
    // Plateaus not matched to a sysfs cache level (names up to the deepest possible).
    for k in 1..=8 {
        let why = "a plateau matched to no cache level the machine lists: no figure describes it";
        p.withhold(&[&format!("plateau_{k}")], why);
    }
    p.done()
}
