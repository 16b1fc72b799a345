//! mem.latency's predictions: cache levels from the parts table at the core's clock.

use crate::experiments::parts::{self, Pick};
use crate::experiments::predict::{Input, Predictions};
use crate::experiments::Context;
use crate::results::Prediction;

/// The parts table's cycles for `what`, or why it names none.
fn cycles(ctx: &Context, what: &str, pick: Pick) -> Input {
    match parts::figure(ctx.machine, what, pick) {
        Ok((cyc, key, reference)) => Input::table("cycles", cyc, "cycles", what, &key, reference),
        Err(why) => Input::missing("cycles", why),
    }
}

pub(super) fn predict(ctx: &Context) -> Vec<(String, Prediction)> {
    let mut p = Predictions::new(ctx);
    let (ghz, src) = ctx.core_ghz();
    let f_core = Input::machine("f_core", Some(ghz * 1e9), "Hz", src, "");
    let caches = ctx.machine.data_caches();
    // lmbench's 16 KiB point is four pages, inside any L1 data cache of 16 KiB or more.
    if let Some(l1) = caches
        .iter()
        .find(|c| c.level == 1 && c.size_bytes >= 16 << 10)
    {
        let what = "L1 data load-to-use latency";
        let size = sysfs_size(l1.size_bytes, "machine: sysfs L1 data cache size");
        let cyc = cycles(ctx, what, |c| c.l1d_cycles);
        p.state("lmbench_16KiB", &[&cyc, &f_core, &size], |v| {
            Prediction::new(
                v[0] / ghz,
                format!(
                    "{} cycles ({what}, parts table) / f_core: 16 KiB fits the L1 data cache",
                    v[0]
                ),
            )
        });
    }
    cache_levels(&mut p, ctx, &f_core, ghz);
    // Base pages add a page walk per access far beyond the TLB's reach; no published
    // walk cost per part (nor nested paging's under a hypervisor) is in the table.
    p.withhold(
        &["dram"],
        "a random chase over base pages adds a page walk per access, and the parts table \
         names no published page-walk cost",
    );
    let dram = match parts::figure(ctx.machine, "idle DRAM latency", |c| c.dram_ns) {
        Ok((ns, key, reference)) => {
            Input::table("dram", ns, "ns", "idle DRAM latency", &key, reference)
        }
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
    let plateaus: Vec<String> = (1..=8).map(|k| format!("plateau_{k}")).collect();
    let plateaus: Vec<&str> = plateaus.iter().map(String::as_str).collect();
    p.withhold(
        &plateaus,
        "a plateau matched to no cache level the machine lists: no figure describes it",
    );
    p.done()
}

/// Each sysfs cache level at the parts table's cycles over the core's clock.
fn cache_levels(p: &mut Predictions, ctx: &Context, f_core: &Input, ghz: f64) {
    for c in &ctx.machine.data_caches() {
        let (name, what, pick): (String, &str, Pick) = match c.level {
            1 => ("l1d".into(), "L1 data load-to-use latency", |c| {
                c.l1d_cycles
            }),
            2 => ("l2".into(), "L2 load-to-use latency", |c| c.l2_cycles),
            3 => ("l3".into(), "L3 load-to-use latency", |c| c.l3_cycles),
            l => {
                let why = format!("the parts table has no level-{l} cache figures");
                p.withhold(&[&format!("l{l}")], &why);
                continue;
            }
        };
        let size = sysfs_size(c.size_bytes, "machine: sysfs cache size");
        let cyc = cycles(ctx, what, pick);
        p.state(&name, &[&cyc, f_core, &size], |v| {
            Prediction::new(
                v[0] / ghz,
                format!("{} cycles ({what}, parts table) / f_core", v[0]),
            )
        });
    }
}

fn sysfs_size(bytes: u64, source: &str) -> Input {
    Input::machine("size", Some(bytes as f64), "bytes", source, "")
}
