//! The report's closing table, its CSV columns and the predicted-against-measured plot,
//! on the results fixtures (tests/fixtures/results; `quick-7c5d72d` is a quick run whose
//! prediction inputs carry kinds, the other two predate kinds). The plot is also laid out
//! by headless Chromium when /usr/bin/chromium exists (.ci/run installs it).

mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/results")
        .join(name)
}

const FIXTURES: &[&str] = &["cpu-2026-11-23", "smoke-6d34f9f", "quick-7c5d72d"];

/// (experiment, metric) of every metric with a prediction, in document order.
fn predicted(dir: &Path) -> Vec<(String, String)> {
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap();
    let mut v = Vec::new();
    for e in doc["experiments"].as_array().unwrap() {
        for m in e["metrics"].as_array().into_iter().flatten() {
            if m["prediction"]["value"]
                .as_f64()
                .is_some_and(f64::is_finite)
            {
                v.push((
                    e["id"].as_str().unwrap().to_string(),
                    m["name"].as_str().unwrap().to_string(),
                ));
            }
        }
    }
    v
}

/// Renders the fixture's reports (and its CSV export) into a new folder.
fn render(dir: &Path) -> (tempfile::TempDir, String, String, String) {
    let out = tempfile::tempdir().unwrap();
    let csv = out.path().join("metrics.csv");
    assert_cmd::Command::cargo_bin("osmeter")
        .unwrap()
        .env("OSMETER_HISTORY_DB", out.path().join("h.sqlite"))
        .args(["report", "--quiet", "--out"])
        .arg(out.path())
        .arg(dir.join("results.json"))
        .arg("--export")
        .arg("csv")
        .arg(&csv)
        .assert()
        .success();
    let read = |p: PathBuf| std::fs::read_to_string(p).unwrap();
    let md = read(out.path().join("report.md"));
    let html = read(out.path().join("report.html"));
    let csv = read(csv);
    (out, md, html, csv)
}

/// A Markdown table row's cells (a `\|` inside a cell is not a separator).
fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    let mut out = vec![String::new()];
    let mut prev = ' ';
    for c in inner.chars() {
        if c == '|' && prev != '\\' {
            out.push(String::new());
        } else {
            out.last_mut().unwrap().push(c);
        }
        prev = c;
    }
    out.into_iter().map(|c| c.trim().to_string()).collect()
}

/// RFC 4180 records (quoted fields may hold commas and doubled quotes).
fn csv_records(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for line in text.split("\r\n").filter(|l| !l.is_empty()) {
        let (mut row, mut cur, mut quoted) = (Vec::new(), String::new(), false);
        let mut it = line.chars().peekable();
        while let Some(c) = it.next() {
            match c {
                '"' if quoted && it.peek() == Some(&'"') => {
                    cur.push('"');
                    it.next();
                }
                '"' => quoted = !quoted,
                ',' if !quoted => row.push(std::mem::take(&mut cur)),
                c => cur.push(c),
            }
        }
        row.push(cur);
        rows.push(row);
    }
    rows
}

#[test]
fn report_md_ends_with_the_closing_table_one_full_row_per_predicted_metric() {
    for name in FIXTURES {
        let dir = fixture(name);
        let want = predicted(&dir);
        assert!(!want.is_empty(), "{name} has predictions");
        let (_out, md, _, _) = render(&dir);
        let at = md.rfind("\n## ").unwrap();
        let last = &md[at..];
        assert!(
            last.starts_with("\n## Closing table\n"),
            "{name}: the last section is {:?}",
            &last[..40.min(last.len())]
        );
        let rows: Vec<Vec<String>> = last
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| ---"))
            .map(cells)
            .collect();
        assert_eq!(
            rows[0],
            [
                "operation",
                "base hardware",
                "software overhead",
                "predicted",
                "measured mean ± SD",
                "measured median [95% CI]"
            ],
            "{name}"
        );
        let body = &rows[1..];
        assert_eq!(
            body.len(),
            want.len(),
            "{name}: one row per predicted metric"
        );
        for (row, (e, m)) in body.iter().zip(&want) {
            assert_eq!(row.len(), 6, "{name}: {row:?}");
            assert!(row.iter().all(|c| !c.is_empty()), "{name}: {row:?}");
            assert!(row[0].starts_with(&format!("{e} {m}")), "{row:?}");
            // Mean ± SD, or why there is no SD; never a bare SD of zero for one sample.
            assert!(
                row[4].contains(" ± ") || row[4].contains("no SD") || row[4] == "out of range",
                "{name}: {row:?}"
            );
        }
        // Footnotes for what is not split, each cited by a row.
        for (i, _) in last.match_indices("\n[") {
            let n: String = last[i + 2..]
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            assert!(
                body.iter().any(|r| r[0].contains(&format!(" [{n}]"))),
                "{name}: footnote [{n}] cited by no row"
            );
        }
    }
}

#[test]
fn kinds_split_a_current_run_and_an_old_one_says_why_it_cannot() {
    let (_o, md, _, _) = render(&fixture("quick-7c5d72d"));
    let table = &md[md.rfind("\n## Closing table").unwrap()..];
    let row = |op: &str| {
        table
            .lines()
            .find(|l| l.starts_with(&format!("| {op} ")))
            .map(cells)
            .unwrap_or_else(|| panic!("{op} missing"))
    };
    // cpu.loop's prediction is the clock alone: base hardware, no software input.
    let l = row("cpu.loop iteration");
    assert_eq!((l[1] == l[3], l[2].as_str()), (true, "—"), "{l:?}");
    // Two system calls and two switches, all measured through the kernel: software.
    let t = row("cpu.thread-create create_join");
    assert_eq!((t[1].as_str(), t[2] == t[3]), ("—", true), "{t:?}");
    // Its page and mapping counts are counts, not hardware costs.
    let f = row("cpu.process-create fork_exit_wait");
    assert_eq!((f[1].as_str(), f[2] == f[3]), ("—", true), "{f:?}");
    // A formula of both kinds is shown whole under "predicted" only, with the reason.
    let f = row("mem.pagefault minor_fault");
    assert_eq!((f[1].as_str(), f[2].as_str()), ("not split", "not split"));
    assert!(
        table.contains(
            "Not split: it combines hardware inputs (page_size, store_bandwidth) with software ones (entry)"
        ),
        "{table}"
    );

    let (_o, md, _, _) = render(&fixture("smoke-6d34f9f"));
    assert!(
        md.contains("Not split: its inputs carry no kinds (the document predates them)."),
        "an old document says why it is not split"
    );
}

#[test]
fn csv_carries_mean_sd_and_the_prediction_with_its_split() {
    let dir = fixture("quick-7c5d72d");
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap();
    let (_o, _, _, csv) = render(&dir);
    let rows = csv_records(&csv);
    let head = &rows[0];
    let col = |n: &str| {
        head.iter()
            .position(|h| h == n)
            .unwrap_or_else(|| panic!("no column {n}: {head:?}"))
    };
    assert!(rows.iter().all(|r| r.len() == head.len()), "ragged CSV");
    let mut with_prediction = 0;
    for e in doc["experiments"].as_array().unwrap() {
        for m in e["metrics"].as_array().into_iter().flatten() {
            let (id, name) = (e["id"].as_str().unwrap(), m["name"].as_str().unwrap());
            let r = rows
                .iter()
                .find(|r| r[col("experiment")] == id && r[col("metric")] == name)
                .unwrap_or_else(|| panic!("{id} {name} missing"));
            let num = |c: &str| r[col(c)].parse::<f64>().ok();
            let s = &m["summary"];
            assert_eq!(num("mean"), s["mean"].as_f64(), "{id} {name}");
            if s["n"].as_u64().unwrap() >= 2 {
                assert_eq!(num("sd"), s["stddev"].as_f64(), "{id} {name}");
            } else {
                assert_eq!(r[col("sd")], "", "{id} {name}: one sample, no SD");
            }
            match m["prediction"]["value"].as_f64() {
                Some(p) => {
                    with_prediction += 1;
                    assert_eq!(num("predicted"), Some(p), "{id} {name}");
                    let (hw, sw) = (num("predicted_hardware"), num("predicted_software"));
                    let note = &r[col("split_note")];
                    // Exactly one of: the whole as hardware, as software, or a reason.
                    let shown = [hw.is_some(), sw.is_some(), !note.is_empty()];
                    assert_eq!(shown.iter().filter(|x| **x).count(), 1, "{r:?}");
                    assert!(hw.or(sw).is_none_or(|v| v == p), "{r:?}");
                }
                None => assert_eq!(r[col("predicted")], "", "{id} {name}"),
            }
        }
    }
    assert_eq!(with_prediction, predicted(&dir).len());
}

/// Marks drawn on the plot, and the predicted metrics listed as left off it.
fn plot_marks(html: &str) -> (usize, usize) {
    let marks =
        html.matches("class=\"pp-point\"").count() + html.matches("class=\"pp-bound\"").count();
    let left = html
        .split("<ul class=\"left-off\">")
        .nth(1)
        .map(|s| s.split("</ul>").next().unwrap().matches("<li>").count())
        .unwrap_or(0);
    (marks, left)
}

#[test]
fn the_plot_has_one_mark_per_predicted_metric() {
    for name in FIXTURES {
        let dir = fixture(name);
        let (_o, _, html, _) = render(&dir);
        let n = predicted(&dir).len();
        let (marks, left) = plot_marks(&html);
        assert_eq!(marks + left, n, "{name}");
        assert!(html.contains("class=\"one-to-one\""), "{name}");
        assert!(html.contains("class=\"band\""), "{name}");
        // Every mark carries its hover label.
        for mark in html.split("class=\"pp-").skip(1) {
            assert!(mark.contains("<title>"), "{name}: a mark without a label");
        }
    }
    // A current quick run puts every predicted metric on the plot, bounds as bounds.
    let dir = fixture("quick-7c5d72d");
    let (_o, _, html, _) = render(&dir);
    assert_eq!(plot_marks(&html), (predicted(&dir).len(), 0));
    assert!(html.matches("class=\"pp-bound\"").count() > 0);
    // The old smoke run's negative fs.contention model_slope is listed, not plotted.
    let (_o, _, html, _) = render(&fixture("smoke-6d34f9f"));
    let left = html.split("<ul class=\"left-off\">").nth(1).unwrap();
    assert!(
        left.contains("fs.contention model_slope: the median -20.85 us"),
        "{left}"
    );
}

#[test]
fn a_negative_cost_is_marked_with_its_reason_not_printed_as_a_result() {
    let (_o, md, html, _) = render(&fixture("quick-7c5d72d"));
    // cpu.call per_argument, a least-squares slope, came out at -0.07 ns.
    for row in md
        .lines()
        .filter(|l| l.starts_with('|') && l.contains("per_argument"))
    {
        assert!(!row.contains("-0.0"), "printed as a result: {row}");
        assert!(row.contains("out of range (see note)"), "{row}");
    }
    assert!(
        md.contains("- *cpu.call per_argument*: the median -0.07 ns (95% interval"),
        "the note gives the figure and the reason"
    );
    assert!(md.contains("a duration cannot be"));
    let row = html
        .split("<tr")
        .map(|r| r.split("</tr>").next().unwrap())
        .filter(|r| r.contains("per_argument</"))
        .collect::<Vec<_>>();
    assert!(!row.is_empty());
    for r in row {
        assert!(!r.contains("-0.0"), "printed as a result: {r}");
    }
}

#[test]
fn a_formula_shared_by_several_rows_is_written_once() {
    let dir = fixture("quick-7c5d72d");
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap();
    let call = doc["experiments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == "cpu.call")
        .unwrap();
    let formulas: Vec<&str> = call["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["prediction"]["formula"].as_str())
        .collect();
    assert_eq!(formulas.len(), 8);
    assert!(formulas.iter().all(|f| *f == formulas[0]), "one formula");
    let (_o, md, html, _) = render(&dir);
    // Once in the predicted-vs-measured table, once in cpu.call's list of predictions.
    let section = |doc: &str, from: &str, to: &str| {
        let a = doc.find(from).unwrap();
        doc[a..a + doc[a..].find(to).unwrap()].to_string()
    };
    let table = section(&md, "## Predicted vs measured", "\n## ");
    assert_eq!(table.matches(formulas[0]).count(), 1, "{table}");
    assert!(table.contains("(one formula for the 8 rows args_0 .. args_7)"));
    assert_eq!(table.matches("| as for args_0 |").count(), 7);
    assert_eq!(
        md.matches(formulas[0]).count(),
        2,
        "once per table and list"
    );
    let escaped = formulas[0].replace('>', "&gt;");
    let table = section(&html, "<h2 id=\"summary\">", "</table>");
    assert_eq!(
        table.matches(&escaped).count(),
        1,
        "written once in report.html"
    );
    assert_eq!(html.matches(&escaped).count(), 2);
}

#[test]
fn chromium_lays_out_one_mark_per_predicted_metric() {
    if !common::have_chromium("chromium plot layout") {
        return;
    }
    let dir = fixture("quick-7c5d72d");
    let n = predicted(&dir).len();
    let (out, _, html, _) = render(&dir);
    // The report itself: no console error, no refused load.
    let report = out.path().join("report.html");
    let (_, log) = common::chromium(&report, &["--dump-dom".into()]);
    let problems = common::page_problems(&log);
    assert!(problems.is_empty(), "{problems:?}");
    // The plot alone in a page that measures it (the report forbids scripts): every mark
    // is laid out with a size, inside its panel's frame.
    let fig_at = html.find("<figure class=\"prediction-plot\"").unwrap();
    let fig_end = fig_at + html[fig_at..].find("</figure>").unwrap() + "</figure>".len();
    let probe = out.path().join("probe.html");
    std::fs::write(
        &probe,
        format!(
            "<!DOCTYPE html><html><body>{}<pre id=\"out\"></pre><script>\
             const r = [];\
             for (const m of document.querySelectorAll('.pp-point, .pp-bound')) {{\
               const b = m.getBoundingClientRect();\
               const f = m.ownerSVGElement.getBoundingClientRect();\
               r.push(b.width > 0 && b.height > 0 && b.left >= f.left - 20 && b.right <= f.right + 20\
                 && b.top >= f.top && b.bottom <= f.bottom ? 1 : 0);\
             }}\
             document.getElementById('out').textContent = 'laid out ' + r.filter(x => x).length + ' of ' + r.length;\
             </script></body></html>",
            &html[fig_at..fig_end]
        ),
    )
    .unwrap();
    let (dom, _) = common::chromium(&probe, &["--dump-dom".into()]);
    assert!(
        dom.contains(&format!("laid out {n} of {n}")),
        "{}",
        dom.split("<pre id=\"out\">").nth(1).unwrap_or(&dom[..0])
    );
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("prediction-plot.png");
    let (_, log) = common::chromium(
        &probe,
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1400,1300".into(),
        ],
    );
    assert!(shot.exists(), "no screenshot: {log}");
    eprintln!("screenshot of the plot: {}", shot.display());
}
