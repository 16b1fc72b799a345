//! Every sentence template the report can print that names a cause or a comparison is
//! registered in docs/SENTENCES.md with the gate that must hold for it to print and the
//! test that shows the gate closing.
//!
//! The scan reads the string literals of the production code that builds findings, notes,
//! check names and details, grade reasons and the `io` reports, and the sentences of the
//! method paragraphs `method!` compiles in (docs/methods); a literal with causal or
//! comparative language (`TERMS`) must contain a registered fragment, and every registered
//! fragment must still be in a literal of the file its row names. A row whose gate is
//! "none: ..." is an open sentence, allowed but counted against `OPEN_AT_MOST`; a gated
//! row names its test, or says `untested` (counted against `UNTESTED_AT_MOST`); "check:"
//! and "fact:" rows (a check's own name or detail, a relation printed beside its figures)
//! need no test.

mod common;

use std::path::{Path, PathBuf};

/// Where the report's sentences are built.
const SCANNED: &[&str] = &[
    "src/experiments",
    "src/findings.rs",
    "src/grade.rs",
    "src/io",
];

/// The registry.
const REGISTRY: &str = "docs/SENTENCES.md";

/// Rows whose gate is "none: ..." (ungated sentences, each a known defect): lower this as
/// they are gated or reworded; never raise it to let a new one in.
const OPEN_AT_MOST: usize = 0;

/// Gated rows whose test cell says `untested` (no test shows the gate closing yet): lower
/// this as tests are named.
const UNTESTED_AT_MOST: usize = 12;

/// Causal or comparative language, as (phrase, needs a word boundary on the left). A
/// phrase matches whole words; "which ... cannot" and "so" (not "so that", a purpose) are
/// handled in `causal_terms`.
const TERMS: &[(&str, bool)] = &[
    ("because", true),
    ("cause", true),
    ("causes", true),
    ("caused", true),
    ("due to", true),
    ("price", true),
    ("as with", true),
    ("explains", true),
    ("explained", true),
    ("is what", true),
    ("faster", true),
    ("slower", true),
    ("cheaper", true),
    ("dearer", true),
    ("more than", true),
    ("less than", true),
    // "{:.0}x less": the placeholder is replaced by N before matching.
    ("nx less", true),
    ("nx more", true),
];

/// The tree scanned: this crate, or `OSMETER_SENTENCES_ROOT` (another checkout, e.g. a
/// branch about to be merged).
fn root() -> PathBuf {
    std::env::var_os("OSMETER_SENTENCES_ROOT")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into())
}

/// The string literals of `src` (ordinary and raw; comments, chars and byte strings
/// skipped) as (line, text as written between the quotes).
fn literals(src: &str) -> Vec<(usize, String)> {
    let c: Vec<char> = src.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let (mut i, mut line, mut out) = (0, 1, Vec::new());
    // The index after the literal whose opening quote is at `i`.
    let end_of = |mut i: usize, q: char| -> usize {
        i += 1;
        while i < c.len() && c[i] != q {
            i += if c[i] == '\\' { 2 } else { 1 };
        }
        i + 1
    };
    while i < c.len() {
        let ch = c[i];
        let start_line = line;
        let next = if ch == '/' && at(i + 1) == '/' {
            (i..c.len()).find(|&j| c[j] == '\n').unwrap_or(c.len())
        } else if ch == '/' && at(i + 1) == '*' {
            (i + 2..c.len())
                .find(|&j| c[j] == '*' && at(j + 1) == '/')
                .map_or(c.len(), |j| j + 2)
        } else if ch == '"' {
            let j = end_of(i, '"');
            out.push((start_line, c[i + 1..j - 1].iter().collect()));
            j
        } else if ch == '\'' && (at(i + 1) == '\\' || at(i + 2) == '\'') {
            end_of(i, '\'')
        } else if ch == 'b' && (at(i + 1) == '"' || at(i + 1) == '\'') {
            end_of(i + 1, at(i + 1))
        } else if ch == 'r' && (at(i + 1) == '"' || at(i + 1) == '#') {
            let hashes = (i + 1..c.len()).take_while(|&j| c[j] == '#').count();
            let open = i + 1 + hashes;
            if at(open) != '"' {
                open // r#ident
            } else {
                let close = (open + 1..c.len())
                    .find(|&j| c[j] == '"' && (1..=hashes).all(|k| at(j + k) == '#'))
                    .unwrap_or(c.len());
                out.push((start_line, c[open + 1..close].iter().collect()));
                close + 1 + hashes
            }
        } else if ch.is_alphanumeric() || ch == '_' {
            (i..c.len())
                .find(|&j| !(c[j].is_alphanumeric() || c[j] == '_'))
                .unwrap_or(c.len())
        } else {
            i + 1
        };
        line += c[i..next.min(c.len())]
            .iter()
            .filter(|&&x| x == '\n')
            .count();
        i = next;
    }
    out
}

/// A literal as the registry quotes it: line continuations removed, whitespace collapsed,
/// `\"` as `"`.
fn normal(lit: &str) -> String {
    let mut s = String::new();
    let mut it = lit.chars().peekable();
    while let Some(ch) = it.next() {
        if ch == '\\' && it.peek() == Some(&'\n') {
            while it.peek().is_some_and(|c| c.is_whitespace()) {
                it.next();
            }
        } else if ch == '\\' && it.peek() == Some(&'"') {
            s.push('"');
            it.next();
        } else {
            s.push(ch);
        }
    }
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` lower-cased with each `{...}` placeholder replaced by `n`.
fn words_of(text: &str) -> String {
    let mut s = String::new();
    let mut depth = 0;
    for ch in text.to_lowercase().chars() {
        match ch {
            '{' => depth += 1,
            '}' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    s.push('n');
                }
            }
            _ if depth == 0 => s.push(ch),
            _ => {}
        }
    }
    s
}

fn is_word(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || c == '_')
}

/// Where `phrase` occurs in `w` as whole words.
fn find_words(w: &str, phrase: &str, left: bool) -> Vec<usize> {
    w.match_indices(phrase)
        .map(|(i, _)| i)
        .filter(|&i| {
            let before = w[..i].chars().next_back();
            let after = w[i + phrase.len()..].chars().next();
            (!left || !is_word(before)) && !is_word(after)
        })
        .collect()
}

/// The causal or comparative terms in a literal.
fn causal_terms(text: &str) -> Vec<&'static str> {
    let w = words_of(text);
    let mut found: Vec<&str> = TERMS
        .iter()
        .filter(|(p, left)| !find_words(&w, p, *left).is_empty())
        .map(|(p, _)| *p)
        .collect();
    let so_that = find_words(&w, "so that", true);
    if find_words(&w, "so", true)
        .iter()
        .any(|i| !so_that.contains(i))
    {
        found.push("so");
    }
    let which = find_words(&w, "which", true);
    if find_words(&w, "cannot", true)
        .iter()
        .any(|&c| which.iter().any(|&k| k < c))
    {
        found.push("which ... cannot");
    }
    found
}

/// A literal of the scanned code: where it is and its normal text.
#[derive(Debug)]
struct Literal {
    file: String,
    line: usize,
    text: String,
}

fn scan() -> Vec<Literal> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).expect("read dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    for s in SCANNED {
        let p = root().join(s);
        if p.is_dir() {
            walk(&p, &mut files);
        } else {
            files.push(p);
        }
    }
    files.sort();
    let mut out = Vec::new();
    let mut pages = std::collections::BTreeSet::new();
    for p in files {
        let rel = p
            .strip_prefix(root())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let src = std::fs::read_to_string(&p).expect("read source");
        let prod = common::production(&rel, &src);
        pages.extend(method_paragraphs(&prod));
        for (line, lit) in literals(&prod) {
            out.push(Literal {
                file: rel.clone(),
                line,
                text: normal(&lit),
            });
        }
    }
    // The method text each report prints: the paragraphs `method!` compiles in, one
    // sentence at a time.
    for (id, n) in pages {
        let file = format!("docs/methods/{id}.md");
        let page = std::fs::read_to_string(root().join(&file)).expect("method page");
        let para = page.split("\n\n").nth(n).unwrap_or("");
        let before: usize = page
            .split("\n\n")
            .take(n)
            .map(|p| p.lines().count() + 1)
            .sum();
        for sentence in para.split(". ") {
            out.push(Literal {
                file: file.clone(),
                line: before + 1,
                text: normal(sentence),
            });
        }
    }
    out
}

/// The (id, paragraph) of every `method!("id")` or `method!("id", n)` in `src`.
fn method_paragraphs(src: &str) -> Vec<(String, usize)> {
    src.split("method!(\"")
        .skip(1)
        .filter_map(|rest| {
            let (id, after) = rest.split_once('"')?;
            let n = match after.trim_start().strip_prefix(',') {
                Some(n) => n.split(')').next()?.trim().parse().ok()?,
                None => 1,
            };
            Some((id.to_string(), n))
        })
        .filter(|(id, _)| id.contains('.'))
        .collect()
}

/// One row of the registry.
#[derive(Debug)]
struct Row {
    line: usize,
    fragment: String,
    file: String,
    gate: String,
    tests: Vec<String>,
}

/// The cells of a table row, split at `|` not escaped as `\|`.
fn cells(l: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut it = l.trim().trim_matches('|').chars().peekable();
    while let Some(ch) = it.next() {
        if ch == '\\' && it.peek() == Some(&'|') {
            out.last_mut().unwrap().push('|');
            it.next();
        } else if ch == '|' {
            out.push(String::new());
        } else {
            out.last_mut().unwrap().push(ch);
        }
    }
    out.iter().map(|c| c.trim().to_string()).collect()
}

fn registry(doc: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    for (k, l) in doc.lines().enumerate() {
        if !l.starts_with("| `") {
            continue;
        }
        let c = cells(l);
        assert_eq!(c.len(), 4, "{REGISTRY}:{}: want 4 cells: {l}", k + 1);
        let unquote = |s: &str| s.trim_matches('`').to_string();
        rows.push(Row {
            line: k + 1,
            fragment: unquote(&c[0]),
            file: unquote(&c[1]),
            gate: c[2].clone(),
            tests: c[3]
                .split(',')
                .map(|t| unquote(t.trim()))
                .filter(|t| !t.is_empty() && t != "—" && t != "-")
                .collect(),
        });
    }
    rows
}

/// A fragment to register for `text`: the whole literal when short, else the words around
/// its first causal term.
fn suggest(text: &str) -> String {
    let esc = |s: &str| s.replace('|', "\\|");
    if text.chars().count() <= 90 {
        return esc(text);
    }
    let w = words_of(text);
    let term = causal_terms(text)[0];
    let key = if term == "which ... cannot" {
        "cannot"
    } else {
        term
    };
    // Find the term in the original text (placeholders make offsets differ).
    let lower = text.to_lowercase();
    let i = lower
        .find(key.trim_start_matches("nx "))
        .unwrap_or_else(|| w.find(key).unwrap_or(0).min(text.len()));
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let pos = chars.iter().position(|&(b, _)| b >= i).unwrap_or(0);
    // About 40 characters either side, cut at spaces so no word or placeholder is split.
    let space = |k: &usize| chars[*k].1 == ' ';
    let from = (pos.saturating_sub(40)..pos).find(space).unwrap_or(pos);
    let to = (pos..(pos + 40).min(chars.len()))
        .rev()
        .find(space)
        .unwrap_or(chars.len());
    let s: String = chars[from..to].iter().map(|x| x.1).collect();
    esc(s.trim())
}

/// Whether `file` defines `fn name`.
fn test_exists(spec: &str) -> Result<(), String> {
    let (file, name) = spec
        .rsplit_once("::")
        .ok_or_else(|| format!("'{spec}' is not FILE::test_name"))?;
    let src = std::fs::read_to_string(root().join(file))
        .map_err(|e| format!("'{spec}': cannot read {file}: {e}"))?;
    let def = format!("fn {name}(");
    if src.contains(&def) {
        Ok(())
    } else {
        Err(format!("'{spec}': {file} has no `fn {name}`"))
    }
}

#[test]
fn every_causal_sentence_is_registered_with_its_gate() {
    let doc = std::fs::read_to_string(root().join(REGISTRY)).expect("docs/SENTENCES.md");
    let rows = registry(&doc);
    let lits = scan();
    let mut bad = Vec::new();
    // Unregistered: a causal literal that holds no registered fragment.
    for l in &lits {
        let terms = causal_terms(&l.text);
        if terms.is_empty() || rows.iter().any(|r| l.text.contains(&r.fragment)) {
            continue;
        }
        bad.push(format!(
            "MISSING {}:{} ({}): \"{}\"\n    add a row: | `{}` | `{}` | GATE | TEST |",
            l.file,
            l.line,
            terms.join(", "),
            l.text,
            suggest(&l.text),
            l.file
        ));
    }
    let (mut open, mut untested) = (0, 0);
    for r in &rows {
        let here = format!("{REGISTRY}:{}", r.line);
        // Stale: the fragment is in no literal of the file the row names.
        let holders: Vec<&Literal> = lits
            .iter()
            .filter(|l| l.text.contains(&r.fragment))
            .collect();
        if !holders.iter().any(|l| l.file == r.file) {
            let elsewhere: Vec<String> = holders.iter().map(|l| l.file.clone()).collect();
            bad.push(match elsewhere.first() {
                Some(f) => format!(
                    "MOVED {here}: `{}` is in {f}, not {}: fix the row's file",
                    r.fragment, r.file
                ),
                None => format!(
                    "STALE {here}: `{}` is no longer in {} (nor any scanned literal): remove or update the row",
                    r.fragment, r.file
                ),
            });
        }
        let plain = ["check:", "fact:"].iter().any(|k| r.gate.starts_with(k));
        if r.gate.is_empty() || r.gate == "GATE" {
            bad.push(format!("NO GATE {here}: `{}`", r.fragment));
        } else if r.gate.starts_with("none:") {
            open += 1;
        } else if r.tests == ["untested"] {
            untested += 1;
            continue;
        } else if r.tests.is_empty() && !plain {
            bad.push(format!(
                "NO TEST {here}: `{}` names a gate but no test that shows it closing",
                r.fragment
            ));
        }
        for t in &r.tests {
            if let Err(e) = test_exists(t) {
                bad.push(format!("BAD TEST {here}: {e}"));
            }
        }
    }
    if untested > UNTESTED_AT_MOST {
        bad.push(format!(
            "{untested} gated rows are `untested`, more than UNTESTED_AT_MOST = {UNTESTED_AT_MOST}: name the test that shows the gate closing"
        ));
    }
    if open > OPEN_AT_MOST {
        bad.push(format!(
            "{open} rows are open (gate \"none: ...\"), more than OPEN_AT_MOST = {OPEN_AT_MOST}: gate the new sentence instead"
        ));
    }
    assert!(
        bad.is_empty(),
        "{} problem(s) with {REGISTRY} (see its header):\n{}",
        bad.len(),
        bad.join("\n")
    );
    eprintln!(
        "{} registered sentences, {open} open (at most {OPEN_AT_MOST}), {untested} untested (at most {UNTESTED_AT_MOST})",
        rows.len()
    );
}

/// The scan's own pieces catch what they name (a check that cannot fail proves nothing).
#[test]
fn the_scan_finds_causal_literals_and_skips_the_rest() {
    let src = "fn f() {\n    // a comment: so faster\n    let a = \"plain words\";\n    \
               let b = format!(\"{} is {:.0}x less\", x);\n    let c = r#\"so it \"went\" there\"#;\n    \
               let d = 'x';\n    let e = \"a long \\\n        sentence, so that it waits\";\n    \
               let g = \"which a device cannot do\";\n}\n#[cfg(test)]\nmod tests {\n    \
               const T: &str = \"because\";\n}\n";
    let lits: Vec<(usize, String)> = literals(&common::production("src/x.rs", src))
        .into_iter()
        .map(|(l, t)| (l, normal(&t)))
        .collect();
    let texts: Vec<&str> = lits.iter().map(|x| x.1.as_str()).collect();
    assert_eq!(
        texts,
        [
            "plain words",
            "{} is {:.0}x less",
            "so it \"went\" there",
            "a long sentence, so that it waits",
            "which a device cannot do"
        ]
    );
    assert_eq!(lits[4].0, 9, "line numbers follow continuations");
    let terms: Vec<Vec<&str>> = texts.iter().map(|t| causal_terms(t)).collect();
    assert!(terms[0].is_empty() && terms[3].is_empty(), "{terms:?}");
    assert_eq!(terms[1], ["nx less"]);
    assert_eq!(terms[2], ["so"]);
    assert_eq!(terms[4], ["which ... cannot"]);
    // "cause" is a word, not part of "because" or a `{cause}` placeholder.
    assert_eq!(causal_terms("because"), ["because"]);
    assert!(causal_terms("base pages{cause}.").is_empty());
    let rows = registry(
        "| `a \\| b` | `src/x.rs` | none: open | — |\n| `c` | `f` | g | `t::u`, `v::w` |\n",
    );
    assert_eq!(rows[0].fragment, "a | b");
    assert!(rows[0].tests.is_empty());
    assert_eq!(rows[1].tests, ["t::u", "v::w"]);
    assert!(
        test_exists("tests/sentences.rs::the_scan_finds_causal_literals_and_skips_the_rest")
            .is_ok()
    );
    assert!(test_exists("tests/sentences.rs::no_such_test").is_err());
    let m = method_paragraphs("method: crate::method!(\"cpu.call\"),\nX = crate::method!(\"cpu.timer\", 2);\nmacro_rules! method!($id:literal)");
    assert_eq!(
        m,
        [("cpu.call".to_string(), 1), ("cpu.timer".to_string(), 2)]
    );
    // The method pages are scanned: a known method sentence is among the literals.
    assert!(scan()
        .iter()
        .any(|l| l.file == "docs/methods/cpu.loop.md" && !l.text.is_empty()));
}
