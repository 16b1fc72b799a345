//! The parts table, `parts.toml` (compiled in; its header says what a figure and a match
//! hold): published latencies per CPU core with their references, and this machine's lookup.

use crate::machine::Machine;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// How a source obtained its figure (`label`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    #[serde(rename = "huge-page chase")]
    HugePageChase,
    Chase,
    /// AnandTech's: a chase on 4 KiB pages with the TLB misses estimated and removed.
    Structural,
    Nominal,
    Simulator,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::HugePageChase => "a chase measured on huge pages",
            Kind::Chase => "a chase measurement, page size not stated",
            Kind::Structural => "a structural estimate, TLB misses removed",
            Kind::Nominal => "the vendor's nominal figure",
            Kind::Simulator => "a simulator's parameter, not a measurement",
        }
    }
}

/// The clock a figure counts: the core's, or the uncore's (ring or mesh: Intel's L3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Unit {
    #[serde(rename = "core cycles")]
    CoreCycles,
    #[serde(rename = "uncore cycles")]
    UncoreCycles,
    #[serde(rename = "ns")]
    Ns,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cited {
    pub value: f64,
    pub kind: Kind,
    pub unit: Unit,
    /// The source's text (in the file, a key of `[refs]`).
    #[serde(rename = "ref")]
    pub reference: String,
    /// Another published figure for the same level that this one contradicts.
    pub disputed: Option<String>,
}

/// What identifies a core in the table.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum Match {
    /// x86 `vendor_id`, CPUID family and the models of that family.
    X86 {
        x86: String,
        family: u32,
        models: Vec<u32>,
    },
    /// arm64 MIDR implementer and part, as /proc/cpuinfo lists them ("0x41", "0xd0c").
    Arm {
        arm_implementer: String,
        arm_part: String,
    },
    /// An Apple silicon chip, by the start of its brand string ("Apple M1").
    AppleChip { apple_chip: String },
    /// macOS `hw.cpufamily`.
    MacFamily { mac_cpufamily: u64 },
}

/// A core's figures, `None` where no source text states one.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Core {
    pub name: String,
    /// "performance" or "efficiency" on a hybrid CPU.
    pub kind: Option<String>,
    pub matches: Vec<Match>,
    #[serde(rename = "l1d")]
    pub l1d_cycles: Option<Cited>,
    #[serde(rename = "l2")]
    pub l2_cycles: Option<Cited>,
    #[serde(rename = "l3")]
    pub l3_cycles: Option<Cited>,
    /// Idle load-to-use latency of DRAM with a full random chase, ns.
    #[serde(rename = "dram")]
    pub dram_ns: Option<Cited>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    refs: BTreeMap<String, String>,
    core: Vec<Core>,
}

/// A table in `parts.toml`'s form, each `ref` and `disputed` key replaced by its text.
pub fn parse(text: &str) -> Result<Vec<Core>, String> {
    let mut t: Table = toml::from_str(text).map_err(|e| format!("the parts table: {e}"))?;
    let resolve = |key: &mut String| {
        let text = t.refs.get(key.as_str());
        *key = text
            .ok_or(format!("the parts table cites no reference '{key}'"))?
            .clone();
        Ok::<(), String>(())
    };
    for c in &mut t.core {
        let figures = [&mut c.l1d_cycles, &mut c.l2_cycles, &mut c.l3_cycles];
        for f in figures.into_iter().chain([&mut c.dram_ns]).flatten() {
            resolve(&mut f.reference)?;
            f.disputed.as_mut().map_or(Ok(()), resolve)?;
        }
    }
    Ok(t.core)
}

/// The compiled-in table (tests parse it, so an error here comes only from an edit).
pub fn cores() -> Result<&'static [Core], String> {
    static TABLE: OnceLock<Result<Vec<Core>, String>> = OnceLock::new();
    let table = TABLE.get_or_init(|| parse(include_str!("parts.toml")));
    table.as_deref().map_err(Clone::clone)
}

/// The key a machine is looked up by, as text ("x86 AuthenticAMD family 25 model 1").
pub fn key_of(m: &Machine) -> String {
    let (p, model) = (&m.cpu.part, &m.cpu.model);
    if let (Some(i), Some(part)) = (&p.arm_implementer, &p.arm_part) {
        return format!("arm64 implementer {i} part {part}");
    }
    if model.starts_with("Apple M") {
        return format!("Apple chip '{model}'");
    }
    if let (Some(f), Some(mo)) = (p.family, p.model) {
        return format!("x86 {} family {f} model {mo}", m.cpu.vendor);
    }
    if let Some(cf) = p.cpufamily {
        return format!("macOS hw.cpufamily {cf:#x}");
    }
    format!("'{model}' (no CPUID family/model, MIDR or chip name recorded)")
}

fn matches(m: &Machine, w: &Match) -> bool {
    let p = &m.cpu.part;
    match w {
        Match::X86 {
            x86,
            family,
            models,
        } => {
            &m.cpu.vendor == x86
                && p.family == Some(*family)
                && p.model.is_some_and(|mo| models.contains(&mo))
        }
        Match::Arm {
            arm_implementer,
            arm_part,
        } => {
            p.arm_implementer.as_ref() == Some(arm_implementer)
                && p.arm_part.as_ref() == Some(arm_part)
        }
        Match::AppleChip { apple_chip } => m.cpu.model.starts_with(apple_chip.as_str()),
        Match::MacFamily { mac_cpufamily } => p.cpufamily == Some(*mac_cpufamily),
    }
}

/// The table entry for this machine's measured core and the key it matched, or why none.
pub fn core(m: &Machine) -> Result<(&'static Core, String), String> {
    let key = key_of(m);
    let t = &m.topology;
    let chosen = t.chosen_cpu.and_then(|c| t.place(c));
    let kind = chosen
        .and_then(|c| c.kind.as_deref())
        .unwrap_or("performance");
    let found: Vec<&Core> = cores()?
        .iter()
        .filter(|c| c.matches.iter().any(|w| matches(m, w)))
        .collect();
    // An entry for one kind of core never stands for the other (an E-core's figures are
    // not a P-core's).
    match found
        .iter()
        .find(|c| c.kind.is_none() || c.kind.as_deref() == Some(kind))
    {
        Some(c) => Ok((*c, format!("{key}: {}", c.name))),
        None if !found.is_empty() => {
            let names: Vec<&str> = found.iter().map(|c| c.name.as_str()).collect();
            let only = names.join(", ");
            Err(format!(
                "the parts table has no {kind}-core entry for {key} (only {only})"
            ))
        }
        None => Err(format!("the parts table has no entry for {key}")),
    }
}

pub type Pick = fn(&Core) -> Option<&Cited>;

/// A figure of this machine's core and the key it matched, or why there is none.
pub fn figure(m: &Machine, what: &str, pick: Pick) -> Result<(Cited, String), String> {
    let (c, key) = core(m)?;
    let f = pick(c)
        .cloned()
        .ok_or_else(|| format!("the parts table names no published {what} for {key}"))?;
    Ok((f, key))
}
