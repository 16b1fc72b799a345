//! The shape of the code as a test: the file-level import graph of `src/` has no cycles,
//! and the layering rules of docs/ARCHITECTURE.md hold.
//!
//! The graph: one node per file reached from `src/lib.rs` or `src/main.rs` through `mod`
//! declarations (`#[cfg(test)]` modules left out: a unit test may import whatever it
//! drives); an edge A -> B when A names a path `crate::…`, `super::…` (or, from the
//! binary, `osmeter::…`) that resolves to a module defined in file B (`src/a.rs`,
//! `src/a/mod.rs`, `src/a/b.rs`; an item resolves to the file of its module). A module's
//! plain references to its own submodules (`cpu::timer::Timer` in the registry of
//! `experiments/mod.rs`) are composition, not imports, and are not edges.
//!
//! Run `cargo test --test architecture -- --include-ignored --nocapture` to see every
//! cycle and every arrow against a rule, each with the line that makes it.

mod common;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;

/// Source files by path relative to the crate root (`src/a.rs`).
type Files = BTreeMap<String, String>;

// ---------------------------------------------------------------------------------------
// Rules

/// A layering rule over modules (a module `m` is `src/m.rs` and everything under `src/m/`).
struct Rule {
    from: &'static str,
    /// When set, the only modules `from` may import.
    only: Option<&'static [&'static str]>,
    /// Modules `from` must never import.
    never: &'static [&'static str],
    why: &'static str,
}

const RULES: &[Rule] = &[
    Rule {
        from: "results",
        only: Some(&["results", "machine", "stats", "units"]),
        never: &[],
        why: "the results document depends only on machine, stats and units",
    },
    Rule {
        from: "history",
        only: None,
        never: &["report"],
        why: "history reads documents through results/, never through the renderers",
    },
    Rule {
        from: "compare",
        only: None,
        never: &["report"],
        why: "compare reads documents through results/, never through the renderers",
    },
    Rule {
        from: "runner",
        only: None,
        never: &["report"],
        why: "the runner returns a RunResults and renders nothing",
    },
    Rule {
        from: "experiments/cpu",
        only: None,
        never: &["experiments/memory", "experiments/fs", "experiments/net"],
        why: "experiment areas share through experiments/kit, never import one another",
    },
    Rule {
        from: "experiments/memory",
        only: None,
        never: &["experiments/cpu", "experiments/fs", "experiments/net"],
        why: "experiment areas share through experiments/kit, never import one another",
    },
    Rule {
        from: "experiments/fs",
        only: None,
        never: &["experiments/cpu", "experiments/memory", "experiments/net"],
        why: "experiment areas share through experiments/kit, never import one another",
    },
    Rule {
        from: "experiments/net",
        only: None,
        never: &["experiments/cpu", "experiments/memory", "experiments/fs"],
        why: "experiment areas share through experiments/kit, never import one another",
    },
];

/// Arrows allowed against a rule: (from file, to file, why). Each one is named and
/// justified in docs/ARCHITECTURE.md; an entry no arrow needs any more fails the test.
const ALLOWED_UPWARD: &[(&str, &str, &str)] = &[];

// ---------------------------------------------------------------------------------------
// Lexer: identifiers, `::` and single punctuation, with comments and literals dropped.

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    PathSep,
    Punct(char),
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

fn lex(src: &str) -> Vec<Token> {
    let c: Vec<char> = src.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    // Skips a quoted literal starting at the quote `c[i]`; returns the index after it.
    let skip_quoted = |mut i: usize, q: char, line: &mut usize| -> usize {
        i += 1;
        while i < c.len() && c[i] != q {
            if c[i] == '\\' {
                i += 1;
            }
            if at(i) == '\n' {
                *line += 1;
            }
            i += 1;
        }
        i + 1
    };
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if ch == '"' {
            i = skip_quoted(i, '"', &mut line);
        } else if ch == '\'' {
            if at(i + 1) == '\\' || at(i + 2) == '\'' {
                i = skip_quoted(i, '\'', &mut line); // a char literal
            } else {
                i += 1; // a lifetime or label: its name lexes as an identifier
            }
        } else if ch == ':' && at(i + 1) == ':' {
            out.push(Token {
                tok: Tok::PathSep,
                line,
            });
            i += 2;
        } else if ch.is_alphanumeric() || ch == '_' {
            // Byte and raw literals start like identifiers: b'x', b"..", r"..", r#".."#, br"..".
            let raw_from = match (ch, at(i + 1), at(i + 2)) {
                ('b', '\'', _) => {
                    i = skip_quoted(i + 1, '\'', &mut line);
                    continue;
                }
                ('b', '"', _) => {
                    i = skip_quoted(i + 1, '"', &mut line);
                    continue;
                }
                ('r', '"' | '#', _) => Some(i + 1),
                ('b', 'r', '"' | '#') => Some(i + 2),
                _ => None,
            };
            if let Some(mut j) = raw_from {
                let mut hashes = 0;
                while at(j) == '#' {
                    hashes += 1;
                    j += 1;
                }
                if at(j) == '"' {
                    j += 1;
                    loop {
                        if j >= c.len() {
                            break;
                        }
                        if c[j] == '"' && (1..=hashes).all(|k| at(j + k) == '#') {
                            j += 1 + hashes;
                            break;
                        }
                        if c[j] == '\n' {
                            line += 1;
                        }
                        j += 1;
                    }
                    i = j;
                    continue;
                }
                if hashes > 0 {
                    i += 2; // r#ident: the identifier follows
                    continue;
                }
            }
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Ident(c[start..i].iter().collect()),
                line,
            });
        } else {
            out.push(Token {
                tok: Tok::Punct(ch),
                line,
            });
            i += 1;
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// One file: its `mod` declarations, inline modules and the paths it names.

/// A path named in a file, with the module it was named in (relative to the file's own
/// module: the inline modules around it).
#[derive(Debug, Clone)]
struct Named {
    inline: Vec<String>,
    segs: Vec<String>,
    line: usize,
}

#[derive(Debug, Default)]
struct Scan {
    /// `mod name;` outside test code: (inline modules around it, name).
    decls: Vec<(Vec<String>, String)>,
    /// Inline modules outside test code, relative to the file's module.
    inline: Vec<Vec<String>>,
    paths: Vec<Named>,
}

fn is_punct(t: Option<&Token>, p: char) -> bool {
    matches!(t, Some(Token { tok: Tok::Punct(x), .. }) if *x == p)
}

/// Index after the attribute starting at `#` (`#[..]` or `#![..]`), and whether it is
/// `#[cfg(test)]`.
fn attribute(t: &[Token], mut i: usize) -> (usize, bool) {
    i += 1;
    if is_punct(t.get(i), '!') {
        i += 1;
    }
    let start = i + 1;
    let mut depth = 0;
    while i < t.len() {
        match t[i].tok {
            Tok::Punct('[') => depth += 1,
            Tok::Punct(']') => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            _ => {}
        }
        i += 1;
    }
    let body: Vec<&Tok> = t[start.min(i)..i].iter().map(|x| &x.tok).collect();
    let test = body
        == [
            &Tok::Ident("cfg".into()),
            &Tok::Punct('('),
            &Tok::Ident("test".into()),
            &Tok::Punct(')'),
        ];
    (i + 1, test)
}

/// Index after the item starting at `i` (its attributes, then up to a `;` outside any
/// bracket or the `}` that closes its body).
fn skip_item(t: &[Token], mut i: usize) -> usize {
    while is_punct(t.get(i), '#') {
        i = attribute(t, i).0;
    }
    let mut depth = 0i32;
    while i < t.len() {
        match t[i].tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']') => depth -= 1,
            Tok::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
                if depth < 0 {
                    return i; // the end of what holds the item (a field, an arm)
                }
            }
            Tok::Punct(';') if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    i
}

/// The paths of a use tree or expression path starting at segment `i`, each appended to
/// `prefix`; returns them and the index after the tree.
fn path_tree(t: &[Token], mut i: usize, prefix: Vec<String>) -> (Vec<Vec<String>>, usize) {
    let mut segs = prefix;
    loop {
        match t.get(i).map(|x| &x.tok) {
            Some(Tok::Ident(s)) => {
                if s != "self" {
                    segs.push(s.clone());
                }
                i += 1;
            }
            _ => return (vec![segs], i),
        }
        if t.get(i).map(|x| &x.tok) != Some(&Tok::PathSep) {
            return (vec![segs], i);
        }
        i += 1;
        if is_punct(t.get(i), '{') {
            i += 1;
            let mut all = Vec::new();
            while i < t.len() && !is_punct(t.get(i), '}') {
                if is_punct(t.get(i), ',') {
                    i += 1;
                    continue;
                }
                let (paths, next) = path_tree(t, i, segs.clone());
                all.extend(paths);
                // Skip `as name` and anything else up to the next item of the group.
                i = next.max(i + 1);
                while i < t.len() && !is_punct(t.get(i), ',') && !is_punct(t.get(i), '}') {
                    i += 1;
                }
            }
            return (all, i + 1);
        }
        if !matches!(t.get(i).map(|x| &x.tok), Some(Tok::Ident(_))) {
            return (vec![segs], i); // `*` or `<` of a turbofish
        }
    }
}

/// `roots`: the identifiers a path into a crate starts with here (`crate`, `super`, and
/// in the binary the library's name).
fn scan(src: &str, roots: &[&str]) -> Scan {
    let t = lex(src);
    let mut s = Scan::default();
    let mut scopes: Vec<(String, i32)> = Vec::new(); // inline modules open, with their depth
    let mut depth = 0i32;
    let mut i = 0;
    let inline_names =
        |scopes: &[(String, i32)]| scopes.iter().map(|x| x.0.clone()).collect::<Vec<_>>();
    while i < t.len() {
        let prev = i.checked_sub(1).and_then(|p| t.get(p));
        match &t[i].tok {
            Tok::Punct('#')
                if is_punct(t.get(i + 1), '[')
                    || (is_punct(t.get(i + 1), '!') && is_punct(t.get(i + 2), '[')) =>
            {
                let (next, test) = attribute(&t, i);
                i = if test { skip_item(&t, next) } else { next };
                continue;
            }
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                depth -= 1;
                if scopes.last().is_some_and(|x| x.1 == depth) {
                    scopes.pop();
                }
            }
            Tok::Ident(k) if k == "mod" => {
                if let Some(Token {
                    tok: Tok::Ident(name),
                    ..
                }) = t.get(i + 1)
                {
                    if is_punct(t.get(i + 2), ';') {
                        s.decls.push((inline_names(&scopes), name.clone()));
                    } else if is_punct(t.get(i + 2), '{') {
                        scopes.push((name.clone(), depth));
                        s.inline.push(inline_names(&scopes));
                        depth += 1;
                        i += 3;
                        continue;
                    }
                }
            }
            Tok::Ident(k)
                if roots.contains(&k.as_str())
                    && t.get(i + 1).map(|x| &x.tok) == Some(&Tok::PathSep)
                    && !is_punct(prev, '$')
                    && prev.map(|x| &x.tok) != Some(&Tok::PathSep) =>
            {
                let line = t[i].line;
                let (paths, next) = path_tree(&t, i, Vec::new());
                for segs in paths {
                    s.paths.push(Named {
                        inline: inline_names(&scopes),
                        segs,
                        line,
                    });
                }
                i = next;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    s
}

// ---------------------------------------------------------------------------------------
// The graph

/// Why an edge exists: the first place the importing file names the other.
#[derive(Debug, Clone)]
struct Tie {
    line: usize,
    path: String,
}

#[derive(Debug, Default)]
struct Graph {
    files: BTreeSet<String>,
    edges: BTreeMap<String, BTreeMap<String, Tie>>,
}

impl Graph {
    fn targets(&self, f: &str) -> impl Iterator<Item = &String> {
        self.edges.get(f).into_iter().flat_map(|m| m.keys())
    }

    fn has_edge(&self, a: &str, b: &str) -> bool {
        self.edges.get(a).is_some_and(|m| m.contains_key(b))
    }

    fn tie(&self, a: &str, b: &str) -> &Tie {
        &self.edges[a][b]
    }
}

/// The file of a module declared `mod name;` in `file` inside the inline modules `inline`.
/// (`root`: the file is a crate root, whose children sit beside it as `mod.rs`'s do.)
fn child_file(
    files: &Files,
    file: &str,
    root: bool,
    inline: &[String],
    name: &str,
) -> Option<String> {
    let p = Path::new(file);
    let dir = p.parent().unwrap_or(Path::new(""));
    let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let mut dir = if root || stem == "mod" {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    for m in inline {
        dir = dir.join(m);
    }
    [
        dir.join(format!("{name}.rs")),
        dir.join(name).join("mod.rs"),
    ]
    .into_iter()
    .map(|p| p.to_string_lossy().into_owned())
    .find(|p| files.contains_key(p))
}

/// The import graph of the crate whose sources are `files`, with library root `src/lib.rs`
/// (named `lib_name` from binaries) and binary roots `src/main.rs` and `src/bin/*.rs`.
fn graph(files: &Files, lib_name: &str) -> Graph {
    // (crate root, module path) -> file; crate of each file and its module path.
    let mut modules: BTreeMap<(String, Vec<String>), String> = BTreeMap::new();
    let mut place: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    let mut scans: BTreeMap<String, Scan> = BTreeMap::new();
    let bins = files
        .keys()
        .filter(|f| *f == "src/main.rs" || (f.starts_with("src/bin/") && f.ends_with(".rs")));
    let roots: Vec<String> = std::iter::once("src/lib.rs".to_string())
        .chain(bins.cloned())
        .filter(|f| files.contains_key(f))
        .collect();
    for root in &roots {
        let words: &[&str] = if root == "src/lib.rs" {
            &["crate", "super"]
        } else {
            &["crate", "super", lib_name]
        };
        let mut queue = VecDeque::from([(root.clone(), Vec::<String>::new())]);
        while let Some((file, mpath)) = queue.pop_front() {
            if place.contains_key(&file) {
                continue;
            }
            let sc = scan(&files[&file], words);
            modules.insert((root.clone(), mpath.clone()), file.clone());
            for inl in &sc.inline {
                let full: Vec<String> = mpath.iter().chain(inl).cloned().collect();
                modules.insert((root.clone(), full), file.clone());
            }
            for (inl, name) in &sc.decls {
                if let Some(child) = child_file(files, &file, &file == root, inl, name) {
                    let mut full: Vec<String> = mpath.iter().chain(inl).cloned().collect();
                    full.push(name.clone());
                    queue.push_back((child, full));
                }
            }
            place.insert(file.clone(), (root.clone(), mpath));
            scans.insert(file, sc);
        }
    }
    let mut g = Graph {
        files: place.keys().cloned().collect(),
        ..Default::default()
    };
    for (file, sc) in &scans {
        let (root, mpath) = &place[file];
        for n in &sc.paths {
            let (krate, mut cur, rest) = match n.segs.first().map(String::as_str) {
                Some("crate") => (root.clone(), vec![], &n.segs[1..]),
                Some("super") => {
                    let mut here: Vec<String> = mpath.iter().chain(&n.inline).cloned().collect();
                    let ups = n.segs.iter().take_while(|s| *s == "super").count();
                    for _ in 0..ups {
                        here.pop();
                    }
                    (root.clone(), here, &n.segs[ups..])
                }
                Some(_) => ("src/lib.rs".to_string(), vec![], &n.segs[1..]),
                None => continue,
            };
            for seg in rest {
                cur.push(seg.clone());
                if !modules.contains_key(&(krate.clone(), cur.clone())) {
                    cur.pop();
                    break;
                }
            }
            let Some(target) = modules.get(&(krate.clone(), cur)) else {
                continue;
            };
            if target != file {
                g.edges
                    .entry(file.clone())
                    .or_default()
                    .entry(target.clone())
                    .or_insert_with(|| Tie {
                        line: n.line,
                        path: n.segs.join("::"),
                    });
            }
        }
    }
    g
}

/// Strongly connected components of more than one file (Tarjan), each sorted, in order.
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    struct St<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut St<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        let g = s.g;
        for w in g.targets(v) {
            if !s.index.contains_key(w.as_str()) {
                visit(s, w);
                let lw = s.low[w.as_str()];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on.contains(w.as_str()) {
                let iw = s.index[w.as_str()];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = St {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for f in &g.files {
        if !s.index.contains_key(f.as_str()) {
            visit(&mut s, f);
        }
    }
    s.out.sort();
    s.out
}

/// The shortest path from `from` to `to` inside `comp` (both ends included).
fn shortest_path(g: &Graph, comp: &BTreeSet<&str>, from: &str, to: &str) -> Option<Vec<String>> {
    let mut prev: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([from]);
    while let Some(v) = queue.pop_front() {
        if v == to {
            let mut path = vec![to.to_string()];
            let mut v = to;
            while v != from {
                v = prev[v];
                path.push(v.to_string());
            }
            path.reverse();
            return Some(path);
        }
        for w in g.targets(v).map(String::as_str) {
            if comp.contains(w) && w != from && !prev.contains_key(w) {
                prev.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    None
}

/// The cycles of one component that show every edge inside it: for each edge a -> b, the
/// shortest way back from b to a; each cycle once, as a closed list of files starting at
/// its smallest file, shortest first.
fn cycles_in(g: &Graph, comp: &[String]) -> Vec<Vec<String>> {
    let inside: BTreeSet<&str> = comp.iter().map(String::as_str).collect();
    let mut found: BTreeSet<(usize, Vec<String>)> = BTreeSet::new();
    for a in comp {
        for b in g.targets(a).filter(|b| inside.contains(b.as_str())) {
            let Some(back) = shortest_path(g, &inside, b, a) else {
                continue;
            };
            let mut cyc: Vec<String> = std::iter::once(a.clone()).chain(back).collect();
            cyc.pop(); // open, to rotate
            let k = (0..cyc.len()).min_by_key(|&i| &cyc[i]).unwrap_or(0);
            cyc.rotate_left(k);
            cyc.push(cyc[0].clone());
            found.insert((cyc.len(), cyc));
        }
    }
    found.into_iter().map(|(_, c)| c).collect()
}

/// A component and its cycles, one line per edge: `a -> b (a:LINE crate::b::x)`.
fn describe_cycle(g: &Graph, comp: &[String]) -> String {
    let mut s = format!(
        "import cycle among {} files ({}):\n",
        comp.len(),
        comp.join(", ")
    );
    for cyc in cycles_in(g, comp) {
        s.push_str("  cycle:\n");
        for w in cyc.windows(2) {
            let t = g.tie(&w[0], &w[1]);
            s.push_str(&format!(
                "    {} -> {}   ({}:{} {})\n",
                w[0], w[1], w[0], t.line, t.path
            ));
        }
    }
    s
}

fn in_module(file: &str, module: &str) -> bool {
    file == format!("src/{module}.rs") || file.starts_with(&format!("src/{module}/"))
}

/// Arrows against `rules` not in `allowed`, as (from, to, why); and the allowed entries
/// no arrow needs.
fn violations(
    g: &Graph,
    rules: &[Rule],
    allowed: &[(&str, &str, &str)],
) -> (Vec<(String, String, String)>, Vec<String>) {
    let mut bad = Vec::new();
    let mut used = BTreeSet::new();
    for (from, targets) in &g.edges {
        for to in targets.keys() {
            for r in rules.iter().filter(|r| in_module(from, r.from)) {
                let broken = r.never.iter().any(|m| in_module(to, m))
                    || r.only.is_some_and(|o| !o.iter().any(|m| in_module(to, m)));
                if !broken {
                    continue;
                }
                if let Some(a) = allowed.iter().find(|a| a.0 == from && a.1 == to) {
                    used.insert(a.0.to_string() + " -> " + a.1);
                    continue;
                }
                bad.push((from.clone(), to.clone(), r.why.to_string()));
            }
        }
    }
    let stale = allowed
        .iter()
        .map(|a| a.0.to_string() + " -> " + a.1)
        .filter(|a| !used.contains(a))
        .collect();
    (bad, stale)
}

fn describe_violations(g: &Graph, bad: &[(String, String, String)]) -> String {
    bad.iter()
        .map(|(a, b, why)| {
            let t = g.tie(a, b);
            format!("    {a} -> {b}   ({a}:{} {}): {why}\n", t.line, t.path)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// The real tree

fn read_tree(root: &Path) -> Files {
    fn walk(dir: &Path, base: &Path, out: &mut Files) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, base, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    let mut out = Files::new();
    walk(&root.join("src"), root, &mut out);
    out
}

/// This crate's tree, or the one under `OSMETER_ARCH_ROOT` (to check another checkout).
fn real_graph() -> Graph {
    let root = std::env::var_os("OSMETER_ARCH_ROOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
    graph(&read_tree(&root), &env!("CARGO_PKG_NAME").replace('-', "_"))
}

/// The checker reads this crate: it finds files and edges that exist, and prints the
/// cycles and arrows against the rules (`--nocapture` to see them).
#[test]
fn real_tree_reads() {
    let g = real_graph();
    let n_edges: usize = g.edges.values().map(|m| m.len()).sum();
    println!("{} files, {n_edges} edges", g.files.len());
    assert!(g.files.len() > 50, "{:?}", g.files);
    assert!(g.files.contains("src/main.rs") && g.files.contains("src/experiments/mod.rs"));
    // Edges that no reorganisation removes: an experiment measures through the harness,
    // and the binary calls the library.
    assert!(
        g.files
            .iter()
            .any(|f| f.starts_with("src/experiments/cpu/") && g.has_edge(f, "src/harness.rs")),
        "no experiment imports the harness: the checker does not read use paths"
    );
    assert!(g.targets("src/main.rs").next().is_some());
    for c in cycles(&g) {
        print!("{}", describe_cycle(&g, &c));
    }
    let (bad, stale) = violations(&g, RULES, ALLOWED_UPWARD);
    if !bad.is_empty() {
        print!(
            "arrows against the layering rules:\n{}",
            describe_violations(&g, &bad)
        );
    }
    if !stale.is_empty() {
        println!("ALLOWED_UPWARD entries no arrow needs: {stale:?}");
    }
}

#[test]
fn no_import_cycles() {
    let g = real_graph();
    let found = cycles(&g);
    let text: String = found.iter().map(|c| describe_cycle(&g, c)).collect();
    assert!(
        found.is_empty(),
        "file-level import cycles in src/:\n{text}"
    );
}

#[test]
fn layering_rules_hold() {
    let g = real_graph();
    let (bad, stale) = violations(&g, RULES, ALLOWED_UPWARD);
    assert!(
        bad.is_empty(),
        "arrows against the layering rules (fix them, or name and justify them in \
         docs/ARCHITECTURE.md and list them in ALLOWED_UPWARD):\n{}",
        describe_violations(&g, &bad)
    );
    assert!(
        stale.is_empty(),
        "ALLOWED_UPWARD entries no arrow needs: {stale:?}"
    );
    assert!(ALLOWED_UPWARD.iter().all(|a| !a.2.trim().is_empty()));
}

// ---------------------------------------------------------------------------------------
// The checker itself, on a tiny tree

fn tree(files: &[(&str, &str)]) -> Files {
    files
        .iter()
        .map(|(p, s)| (p.to_string(), s.to_string()))
        .collect()
}

fn synthetic() -> Files {
    tree(&[
        (
            "src/lib.rs",
            "pub mod a;\npub mod b;\nmod c;\npub mod d;\n#[cfg(test)]\nmod t;\n",
        ),
        // a -> b through a use group; a -> d through `self` in a nested group.
        (
            "src/a.rs",
            "use crate::{b::X, d::{self, Y as Z}};\npub fn g() {}\n",
        ),
        // b -> a in an expression; an inline module whose `super` is b itself; a
        // lifetime, char literals with braces, a string and comments naming c.
        (
            "src/b.rs",
            "pub struct X;\npub fn f<'a>(s: &'a str) -> char {\n    crate::a::g();\n    \
             let _ = \"crate::c::Q\"; // crate::c::Q\n    /* crate::c::Q */\n    '{'\n}\n\
             mod inner {\n    use super::X;\n    pub(super) fn h() {}\n}\n\
             pub(crate) fn k() { let _ = r#\"crate::c::Q\"#; let _ = '}'; }\n",
        ),
        // c is a directory module: c/e.rs reaches a through super::super.
        ("src/c/mod.rs", "mod e;\nuse super::d::Y;\n"),
        ("src/c/e.rs", "pub fn e() { super::super::a::g(); }\n"),
        // Test code in d names c: no edge. `$crate` in a macro names nothing.
        (
            "src/d.rs",
            "pub struct Y;\nmacro_rules! m { () => { $crate::c::Q }; }\n\
             #[cfg(test)]\nmod tests {\n    use crate::c::*;\n}\n\
             #[cfg(test)]\nfn helper() { crate::c::e::e(); }\n",
        ),
        // Only declared under cfg(test): not in the graph.
        ("src/t.rs", "use crate::a::g;\n"),
        // The binary names the library by its name.
        ("src/main.rs", "fn main() { demo::d::Y; }\n"),
    ])
}

#[test]
fn synthetic_tree_edges() {
    let g = graph(&synthetic(), "demo");
    let files: Vec<&str> = g.files.iter().map(String::as_str).collect();
    assert_eq!(
        files,
        [
            "src/a.rs",
            "src/b.rs",
            "src/c/e.rs",
            "src/c/mod.rs",
            "src/d.rs",
            "src/lib.rs",
            "src/main.rs"
        ]
    );
    let edges: Vec<(String, String)> = g
        .edges
        .iter()
        .flat_map(|(a, m)| m.keys().map(move |b| (a.clone(), b.clone())))
        .collect();
    let want = [
        ("src/a.rs", "src/b.rs"),
        ("src/a.rs", "src/d.rs"),
        ("src/b.rs", "src/a.rs"),
        ("src/c/e.rs", "src/a.rs"),
        ("src/c/mod.rs", "src/d.rs"),
        ("src/main.rs", "src/d.rs"),
    ];
    assert_eq!(
        edges,
        want.map(|(a, b)| (a.to_string(), b.to_string())),
        "edges"
    );
    assert_eq!(g.tie("src/b.rs", "src/a.rs").line, 3);
    assert_eq!(g.tie("src/b.rs", "src/a.rs").path, "crate::a::g");
}

#[test]
fn synthetic_tree_cycles() {
    let g = graph(&synthetic(), "demo");
    let found = cycles(&g);
    assert_eq!(found, vec![vec!["src/a.rs".to_string(), "src/b.rs".into()]]);
    let text = describe_cycle(&g, &found[0]);
    assert!(
        text.contains("src/a.rs -> src/b.rs   (src/a.rs:1 crate::b::X)"),
        "{text}"
    );
    assert!(
        text.contains("src/b.rs -> src/a.rs   (src/b.rs:3 crate::a::g)"),
        "{text}"
    );

    // A longer cycle: the shortest one through it is named, with every edge.
    let mut files = synthetic();
    files.insert("src/a.rs".into(), "pub fn g() { crate::d::Y; }\n".into());
    files.insert(
        "src/d.rs".into(),
        "pub struct Y;\npub fn y() { crate::b::f(\"\"); }\n".into(),
    );
    let g = graph(&files, "demo");
    let found = cycles(&g);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0], ["src/a.rs", "src/b.rs", "src/d.rs"]);
    let cycs = cycles_in(&g, &found[0]);
    assert_eq!(cycs, [["src/a.rs", "src/d.rs", "src/b.rs", "src/a.rs"]]);

    // No cycle once b stops calling a.
    let mut files = synthetic();
    files.insert("src/b.rs".into(), "pub struct X;\n".into());
    assert!(cycles(&graph(&files, "demo")).is_empty());
}

#[test]
fn synthetic_tree_rules() {
    let g = graph(&synthetic(), "demo");
    let rules = [
        Rule {
            from: "a",
            only: Some(&["d"]),
            never: &[],
            why: "a sits on d",
        },
        Rule {
            from: "c",
            only: None,
            never: &["d"],
            why: "c never reads d",
        },
    ];
    let (bad, stale) = violations(&g, &rules, &[]);
    let pairs: Vec<(&str, &str)> = bad.iter().map(|v| (v.0.as_str(), v.1.as_str())).collect();
    assert_eq!(
        pairs,
        [("src/a.rs", "src/b.rs"), ("src/c/mod.rs", "src/d.rs")]
    );
    assert!(stale.is_empty());
    let text = describe_violations(&g, &bad);
    assert!(text.contains("src/c/mod.rs:2 super::d::Y"), "{text}");

    // An allowed arrow is no violation; an allowed arrow nobody draws is stale.
    let allowed = [
        ("src/a.rs", "src/b.rs", "named in the docs"),
        ("src/b.rs", "src/d.rs", "no such arrow"),
    ];
    let (bad, stale) = violations(&g, &rules, &allowed);
    assert_eq!(bad.len(), 1);
    assert_eq!(stale, ["src/b.rs -> src/d.rs"]);
}

#[test]
fn lexer_drops_literals_and_comments() {
    let toks =
        lex("a /* x /* nested */ y */ b 'c' '\\'' r##\"q\"# \"##  c // d\n e::f b'x' b\"y\"");
    let idents: Vec<String> = toks
        .iter()
        .filter_map(|t| match &t.tok {
            Tok::Ident(s) => Some(s.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(idents, ["a", "b", "c", "e", "f"]);
    assert_eq!(toks.last().unwrap().line, 2);
}

// ---------------------------------------------------------------------------------------
// Code hygiene: comments keep the reason, not the evidence; functions a person can hold.

/// Evidence that belongs in a commit or docs/VALIDATION.md, not in a code comment.
const EVIDENCE: &[(&str, &str)] = &[
    (r"\bissue \d+", "an issue number"),
    (r"\b20\d\d-\d\d-\d\d\b", "a date"),
    (
        r"(?i)\b(this|the build|the development|the dev) VM\b",
        "the development VM",
    ),
    (r"\bonce here\b", "a value that once stood here"),
    (r"(, |\()was( \d|$)", "an old value"),
    (r"\bstored results showed\b", "a sitting's figures"),
    (
        r"\(here [0-9.]+ ?[A-Za-z/]+|\bhere [0-9.]+ ?(GB|MB|ns|us|ms|GHz|x)\b",
        "a figure measured here",
    ),
];

/// `(line, what, text)` for each comment in `src` that tells history or a sitting's figures.
fn evidence_in_comments(src: &str) -> Vec<(usize, &'static str, String)> {
    use predicates::prelude::*;
    let rules: Vec<_> = EVIDENCE
        .iter()
        .map(|(re, what)| (predicate::str::is_match(*re).unwrap(), *what))
        .collect();
    let mut out = Vec::new();
    for (k, l) in src.lines().enumerate() {
        let t = l.trim_start();
        let comment = if t.starts_with("//") {
            t
        } else if let Some(i) = l
            .find(" // ")
            .filter(|&i| l[..i].matches('"').count() % 2 == 0)
        {
            &l[i + 1..]
        } else {
            continue;
        };
        for (re, what) in &rules {
            if re.eval(comment) {
                out.push((k + 1, *what, comment.trim().to_string()));
            }
        }
    }
    out
}

/// Production functions longer than `limit` lines, as `(lines, first line, name)`.
fn long_functions(src: &str, limit: usize) -> Vec<(usize, usize, String)> {
    let t = lex(src);
    let mut out = Vec::new();
    for i in 0..t.len() {
        let (Tok::Ident(kw), Some(Tok::Ident(name))) = (&t[i].tok, t.get(i + 1).map(|x| &x.tok))
        else {
            continue;
        };
        if kw != "fn" {
            continue;
        }
        let Some(open) = (i + 2..t.len()).find(|&j| matches!(t[j].tok, Tok::Punct('{' | ';')))
        else {
            continue;
        };
        if t[open].tok == Tok::Punct(';') {
            continue;
        }
        let mut depth = 0;
        for tok in &t[open..] {
            match tok.tok {
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => depth -= 1,
                _ => continue,
            }
            if depth == 0 {
                let lines = tok.line - t[i].line + 1;
                if lines > limit {
                    out.push((lines, t[i].line, name.clone()));
                }
                break;
            }
        }
    }
    out
}

/// Whether the comment block above line `at` (1-based; attributes skipped) says why the
/// function below it cannot be split.
fn says_why_long(src: &str, at: usize) -> bool {
    let lines: Vec<&str> = src.lines().collect();
    let mut k = at - 1;
    while k > 0 {
        let l = lines[k - 1].trim_start();
        if l.starts_with("#[") {
            k -= 1;
        } else if l.starts_with("//") {
            if l.contains("cannot be split") {
                return true;
            }
            k -= 1;
        } else {
            break;
        }
    }
    false
}

fn production_tree() -> Vec<(String, String)> {
    let root: std::path::PathBuf = std::env::var_os("OSMETER_ARCH_ROOT")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
    read_tree(&root)
        .into_iter()
        .map(|(p, s)| {
            let prod = common::production(&p, &s);
            (p, prod)
        })
        .collect()
}

/// Code comments keep the reason and drop the evidence: no issue numbers, dates, old values
/// or figures of a development machine (those go to the commit or docs/VALIDATION.md).
#[test]
fn comments_keep_the_reason_not_the_evidence() {
    let mut bad = String::new();
    for (path, src) in production_tree() {
        for (line, what, text) in evidence_in_comments(&src) {
            bad += &format!("    {path}:{line}: {what}: {text}\n");
        }
    }
    assert!(bad.is_empty(), "comments that tell history:\n{bad}");
}

/// No production function passes 100 lines without a sentence above it saying why it
/// cannot be split, and at most five do.
#[test]
fn functions_are_short_or_say_why() {
    let (mut bad, mut excused) = (String::new(), Vec::new());
    for (path, src) in production_tree() {
        for (lines, at, name) in long_functions(&src, 100) {
            if says_why_long(&src, at) {
                excused.push(format!("{path}:{at} {name} ({lines} lines)"));
            } else {
                bad += &format!("    {path}:{at} {name}: {lines} lines\n");
            }
        }
    }
    assert!(bad.is_empty(), "functions over 100 lines:\n{bad}");
    assert!(
        excused.len() <= 5,
        "more than five long functions: {excused:?}"
    );
}

/// Files a person can hold: at most two production files pass 1,000 lines. Prints the
/// experiments' production weight (non-blank lines), which issue 32 bounds.
#[test]
fn files_stay_under_a_thousand_lines() {
    let tree = production_tree();
    let big: Vec<String> = tree
        .iter()
        .map(|(p, s)| (p, s.lines().count()))
        .filter(|&(_, n)| n > 1000)
        .map(|(p, n)| format!("{p}: {n} lines"))
        .collect();
    let experiments: usize = tree
        .iter()
        .filter(|(p, _)| p.starts_with("src/experiments/"))
        .map(|(_, s)| s.lines().filter(|l| !l.trim().is_empty()).count())
        .sum();
    println!("non-blank production lines under src/experiments: {experiments}");
    assert!(big.len() <= 2, "production files over 1,000 lines: {big:?}");
}

#[test]
fn hygiene_checks_catch_what_they_name() {
    let src = "// 44 cycles (issue 20 item 4)\nlet x = 1; // on the build VM\n\
               /// quick: 150 ms, was 250\n// measured 2026-11-24\n// a reason\nlet s = \"// issue 3\";\n";
    let found: Vec<_> = evidence_in_comments(src).into_iter().map(|f| f.0).collect();
    assert_eq!(found, vec![1, 2, 3, 4], "{found:?}");
    let body = "fn a() {\n".to_string() + &"    x();\n".repeat(120) + "}\nfn b() { }\n";
    let long = long_functions(&body, 100);
    assert_eq!(long.len(), 1, "{long:?}");
    assert_eq!((long[0].0, long[0].2.as_str()), (122, "a"));
    assert!(!says_why_long(&body, 1));
    let excused = format!("// A state machine that cannot be split.\n#[inline]\n{body}");
    assert!(says_why_long(&excused, 3));
    let with_tests = "fn p() {}\n#[cfg(test)]\nmod tests {\n fn t() {}\n}\n";
    assert_eq!(common::production("src/a.rs", with_tests), "fn p() {}");
    let test_only = "//! A test rig.\n#![cfg(test)]\nfn rig() {}\n";
    assert_eq!(common::production("src/rig.rs", test_only), "");
}
