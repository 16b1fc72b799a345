//! Renderers: they read a results document (or a comparison of several) and never
//! measure; the commands (crate::commands) decide where their output goes.

pub(crate) mod compare_text;
pub(crate) mod export;
pub(crate) mod figures;
pub(crate) mod fleet;
pub(crate) mod history_page;
pub(crate) mod html;
pub(crate) mod markdown;
pub(crate) mod network;
pub(crate) mod plot;
pub(crate) mod predplot;
pub mod terminal;
pub(crate) mod view;

use crate::results::RunResults;
use std::path::{Path, PathBuf};

/// What `write_reports` wrote.
pub struct Written {
    pub markdown: PathBuf,
    pub html: PathBuf,
    pub plots: Vec<PathBuf>,
}

/// Writes report.md, report.html and one SVG per plot into `folder`.
pub fn write_reports(folder: &Path, r: &RunResults) -> anyhow::Result<Written> {
    use anyhow::Context;
    std::fs::create_dir_all(folder).with_context(|| format!("{}", folder.display()))?;
    let figs = figures::figures(r);
    let mut plots = Vec::new();
    for f in &figs {
        let p = folder.join(&f.file);
        std::fs::write(&p, f.plot.to_svg()).with_context(|| format!("{}", p.display()))?;
        plots.push(p);
    }
    let markdown = folder.join("report.md");
    std::fs::write(&markdown, markdown::render(r, &figs))
        .with_context(|| format!("{}", markdown.display()))?;
    let html = folder.join("report.html");
    std::fs::write(&html, html::render(r, &figs)).with_context(|| format!("{}", html.display()))?;
    Ok(Written {
        markdown,
        html,
        plots,
    })
}
