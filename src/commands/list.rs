//! `osmeter list`: every experiment with its needs and its cost per profile.

use crate::experiments::{self, Profile};
use std::collections::BTreeMap;
use std::process::ExitCode;

#[derive(clap::Args)]
pub(super) struct Args {
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

pub(super) fn run(a: Args) -> ExitCode {
    let all = experiments::registry();
    if a.json {
        let v: Vec<_> = all
            .iter()
            .map(|e| {
                let m = e.meta();
                serde_json::json!({
                    "id": m.id, "area": m.area(), "title": m.title, "description": m.description,
                    "needs": m.needs,
                    "budget_s": Profile::ALL.iter().map(|p| (p.name(), e.budget(*p).as_secs_f64())).collect::<BTreeMap<_, _>>(),
                    "default_repeat": Profile::ALL.iter().map(|p| (p.name(), e.default_repeat(*p))).collect::<BTreeMap<_, _>>(),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(comfy_table::ContentArrangement::Dynamic);
    t.set_header(vec![
        "id",
        "area",
        "description",
        "needs",
        "smoke",
        "quick",
        "standard",
        "thorough",
    ]);
    for e in &all {
        let m = e.meta();
        let mut row = vec![
            m.id.to_string(),
            m.area().to_string(),
            m.description.to_string(),
            m.needs.describe(),
        ];
        row.extend(Profile::ALL.iter().map(|p| {
            format!(
                "{:.1} s",
                (e.budget(*p) * e.default_repeat(*p) as u32).as_secs_f64()
            )
        }));
        t.add_row(row);
    }
    println!("{t}");
    println!("Cost: each experiment's budget times its default runs (smoke 1, other profiles 2 except fs.cache-size; --repeat overrides).");
    ExitCode::SUCCESS
}
