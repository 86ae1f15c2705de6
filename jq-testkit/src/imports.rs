//! The import graph of a crate's own modules, read from its source files,
//! for tests that keep a crate readable bottom-up: no module imports one
//! that imports it back ([`Graph::cycles`]), and each module imports only
//! its own layer or lower ones ([`Graph::layer_violations`]).
//!
//! A module is a file (`src/job/name.rs` is `crate::job::name`). Its
//! imports are the `use` declarations and the paths written in its code
//! that start with `crate`, `$crate`, `super`, `self` or one of its child
//! modules; comments and string literals are not code, so doc links do not
//! count. A path leads to the file of the module it names: importing a
//! name *through* a module depends on that module, wherever the name was
//! first defined, because that is where a reader has to look. The one
//! exception is a *facade*: a file that defines nothing and only declares
//! and re-exports modules (`lib.rs`, a `mod.rs` of `pub use` lines). A
//! facade is a list of names, not a step of the reading, so a path through
//! it leads to the module its re-export names.
//!
//! ```
//! use jq_testkit::imports::Graph;
//! let dir = std::env::temp_dir().join(format!("jq-imports-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! std::fs::write(dir.join("lib.rs"), "mod a;\nmod b;\npub use a::A;\n").unwrap();
//! std::fs::write(dir.join("a.rs"), "pub struct A(crate::b::B);\n").unwrap();
//! std::fs::write(dir.join("b.rs"), "pub struct B;\n").unwrap();
//! let graph = Graph::of_crate(&dir).unwrap();
//! assert!(graph.imports("a.rs").contains("b.rs"));
//! assert!(graph.cycles().is_empty());
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The module-level import graph of one crate; see the [module docs](self).
#[derive(Clone, Debug, Default)]
pub struct Graph {
    /// Every module file, as its path under `src/` (`"job/name.rs"`).
    files: BTreeSet<String>,
    /// Which files each file imports (never itself).
    edges: BTreeMap<String, BTreeSet<String>>,
    /// The facades among them.
    facades: BTreeSet<String>,
}

impl Graph {
    /// Reads every `.rs` file under `src` (a crate's `src/` directory, its
    /// root `lib.rs`). `Err` lists the paths that lead nowhere (a module
    /// that does not define or import the name asked of it): the graph
    /// would be missing their edges, so it is not returned half-made.
    pub fn of_crate(src: &Path) -> Result<Graph, String> {
        let mut sources = BTreeMap::new();
        collect(src, src, &mut sources).map_err(|e| format!("reading {}: {e}", src.display()))?;
        Crate::new(sources).graph()
    }

    /// Every module file, as its path under `src/`.
    pub fn files(&self) -> impl Iterator<Item = &str> {
        self.files.iter().map(String::as_str)
    }

    /// The files `file` imports.
    pub fn imports(&self, file: &str) -> BTreeSet<&str> {
        self.edges.get(file).map(|e| e.iter().map(String::as_str).collect()).unwrap_or_default()
    }

    /// True when `file` is a facade (defines nothing; declares and
    /// re-exports modules).
    pub fn is_facade(&self, file: &str) -> bool {
        self.facades.contains(file)
    }

    /// Every circle of imports, each as the files along it, the first one
    /// repeated at the end (`["a.rs", "b.rs", "a.rs"]`); one circle per
    /// group of files that reach each other.
    pub fn cycles(&self) -> Vec<Vec<String>> {
        let mut cycles = Vec::new();
        for group in self.strongly_connected() {
            if group.len() < 2 {
                continue;
            }
            let members: BTreeSet<&str> = group.iter().map(String::as_str).collect();
            if let Some(cycle) = self.cycle_through(&group[0], &members) {
                cycles.push(cycle);
            }
        }
        cycles
    }

    /// What breaks the layering `layers`: each layer a name and the files it
    /// holds, bottom first, each file a path under `src/` (`"error.rs"`) or
    /// a directory ending in `/` (`"worker/"`: every file under it not named
    /// on its own elsewhere). Reported: a file of no layer
    /// (facades need none), and every import of a file from a higher layer
    /// than its own, as `"a.rs (model) imports b.rs (pool)"`. Facades are
    /// not checked as importers: a crate's public paths may gather names of
    /// every layer. An import of a facade itself is reported as well (a
    /// facade should be read through, never depended on).
    pub fn layer_violations(&self, layers: &[(&str, &[&str])]) -> Vec<String> {
        let layer_of = |file: &str| -> Option<(usize, &str)> {
            let exact = layers.iter().enumerate().find(|(_, (_, files))| files.contains(&file));
            let by_dir = || {
                layers
                    .iter()
                    .enumerate()
                    .flat_map(|(i, (name, files))| files.iter().map(move |f| (i, *name, *f)))
                    .filter(|(_, _, f)| f.ends_with('/') && file.starts_with(f))
                    .max_by_key(|(_, _, f)| f.len())
                    .map(|(i, name, _)| (i, name))
            };
            exact.map(|(i, (name, _))| (i, *name)).or_else(by_dir)
        };
        let mut problems = Vec::new();
        for file in &self.files {
            if self.is_facade(file) {
                continue;
            }
            let Some((mine, my_name)) = layer_of(file) else {
                problems.push(format!("{file} is in no layer"));
                continue;
            };
            for import in self.imports(file) {
                if self.is_facade(import) {
                    problems.push(format!("{file} ({my_name}) imports the facade {import}"));
                    continue;
                }
                match layer_of(import) {
                    Some((theirs, their_name)) if theirs > mine => {
                        problems.push(format!("{file} ({my_name}) imports {import} ({their_name})"))
                    }
                    Some(_) => {}
                    None => problems.push(format!("{file} ({my_name}) imports {import}, which is in no layer")),
                }
            }
        }
        problems
    }

    /// Tarjan's algorithm: the groups of files that reach each other.
    fn strongly_connected(&self) -> Vec<Vec<String>> {
        struct State<'g> {
            graph: &'g Graph,
            index: BTreeMap<&'g str, usize>,
            low: BTreeMap<&'g str, usize>,
            stack: Vec<&'g str>,
            on_stack: BTreeSet<&'g str>,
            groups: Vec<Vec<String>>,
        }
        fn visit<'g>(s: &mut State<'g>, v: &'g str) {
            let i = s.index.len();
            s.index.insert(v, i);
            s.low.insert(v, i);
            s.stack.push(v);
            s.on_stack.insert(v);
            for w in s.graph.edges.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let lw = s.low[w];
                    let lv = s.low[v];
                    s.low.insert(v, lv.min(lw));
                } else if s.on_stack.contains(w) {
                    let iw = s.index[w];
                    let lv = s.low[v];
                    s.low.insert(v, lv.min(iw));
                }
            }
            if s.low[v] == s.index[v] {
                let mut group = Vec::new();
                while let Some(w) = s.stack.pop() {
                    s.on_stack.remove(w);
                    group.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                group.sort();
                s.groups.push(group);
            }
        }
        let mut state = State {
            graph: self,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            groups: Vec::new(),
        };
        for file in &self.files {
            if !state.index.contains_key(file.as_str()) {
                visit(&mut state, file);
            }
        }
        state.groups
    }

    /// A shortest circle from `start` back to it inside `members`.
    fn cycle_through(&self, start: &str, members: &BTreeSet<&str>) -> Option<Vec<String>> {
        let mut previous: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        while let Some(v) = queue.pop_front() {
            for w in self.imports(v) {
                if !members.contains(w) {
                    continue;
                }
                if w == start {
                    return Some(cycle_in_order(start, v, &previous));
                }
                if w != start && !previous.contains_key(w) {
                    previous.insert(w, v);
                    queue.push_back(w);
                }
            }
        }
        None
    }
}

/// The circle `start -> ... -> last -> start` found by the search, where
/// `previous` leads from `last` back to `start`.
fn cycle_in_order(start: &str, last: &str, previous: &BTreeMap<&str, &str>) -> Vec<String> {
    let mut back = vec![last.to_owned()];
    let mut at = last;
    while at != start {
        at = previous[at];
        back.push(at.to_owned());
    }
    back.reverse();
    back.push(start.to_owned());
    back
}

/// Reads the `.rs` files under `dir` into `out`, keyed by path under `root`.
fn collect(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) -> std::io::Result<()> {
    let mut entries = std::fs::read_dir(dir)?.collect::<std::io::Result<Vec<_>>>()?;
    entries.sort_by_key(|e| e.path());
    for entry in entries {
        let path = entry.path();
        if path.is_dir() {
            collect(root, &path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            let name = path.strip_prefix(root).unwrap_or(&path).to_string_lossy().replace('\\', "/");
            out.insert(name, std::fs::read_to_string(&path)?);
        }
    }
    Ok(())
}

/// The module path of a file under `src/`: `lib.rs` is the root,
/// `a/mod.rs` and `a.rs` are `a`, `a/b.rs` is `a::b`.
fn module_of(file: &str) -> Vec<String> {
    let stem = file.strip_suffix(".rs").unwrap_or(file);
    let mut parts: Vec<String> = stem.split('/').map(str::to_owned).collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// One file, with its comments and string literals blanked.
struct Source {
    /// The file's module path.
    module: Vec<String>,
    /// The code: every comment and string literal replaced by spaces.
    code: String,
    /// Inline modules (`mod tests { .. }`): name, and the byte range of
    /// their braces.
    inline: Vec<(String, std::ops::Range<usize>)>,
    /// Names this file defines (items at any depth: a superset is enough to
    /// tell a name that leads nowhere).
    defines: BTreeSet<String>,
    /// `#[macro_export]` macros defined here (they live at the crate root).
    exported_macros: BTreeSet<String>,
    /// Its `use` declarations: each imported name (or `*`), in which module
    /// the declaration is written, and the path as written.
    uses: Vec<Use>,
    /// True when it defines nothing: only module declarations, `use`s and
    /// attributes.
    facade: bool,
    /// True when it invokes a macro where items go: it may define names
    /// this reading cannot see, so any name asked of it is taken as its own.
    expands_items: bool,
}

/// One leaf of a `use` tree.
#[derive(Clone, Debug)]
struct Use {
    /// The name it brings in (its alias, the last segment, or `*`).
    name: String,
    /// The module the declaration is written in (a file's module, or an
    /// inline module inside it).
    scope: Vec<String>,
    /// The path as written (`crate::job::JobId`, `super::x`, `plan::Plan`).
    path: Vec<String>,
    /// Where the declaration starts in the file.
    at: usize,
}

/// The whole crate being read.
struct Crate {
    /// Every file, by path under `src/`.
    sources: BTreeMap<String, Source>,
    /// Every module (file or inline), with the file that holds it.
    modules: BTreeMap<Vec<String>, String>,
}

/// Rust keywords that can start an item (what a file "defines").
const ITEM_KEYWORDS: [&str; 10] = ["fn", "struct", "enum", "trait", "type", "const", "static", "union", "mod", "impl"];

impl Crate {
    fn new(files: BTreeMap<String, String>) -> Crate {
        let mut sources = BTreeMap::new();
        let mut modules = BTreeMap::new();
        for (file, text) in files {
            let module = module_of(&file);
            let code = blank_comments_and_strings(&text);
            let tokens = tokenize(&code);
            let inline = inline_modules(&tokens);
            let mut defines = BTreeSet::new();
            let mut facade = true;
            let mut exported_macros = BTreeSet::new();
            for (i, t) in tokens.iter().enumerate() {
                if t.text == "macro_rules" {
                    facade = false;
                    if let Some(name) = tokens.get(i + 2) {
                        defines.insert(name.text.clone());
                        let attrs = &code[..t.at];
                        if attrs.trim_end().ends_with(']')
                            && attrs[attrs.len().saturating_sub(200)..].contains("macro_export")
                        {
                            exported_macros.insert(name.text.clone());
                        }
                    }
                }
                if ITEM_KEYWORDS.contains(&t.text.as_str()) {
                    // `impl` and `fn` in a facade are definitions; a
                    // declared module (`mod x;`) is not.
                    let declaration = t.text == "mod" && tokens.get(i + 2).is_some_and(|n| n.text == ";");
                    if !declaration {
                        facade = false;
                    }
                    if let Some(name) = tokens.get(i + 1).filter(|n| is_ident(&n.text)) {
                        defines.insert(name.text.clone());
                    }
                }
            }
            for (name, _) in &inline {
                let mut path = module.clone();
                path.push(name.clone());
                modules.insert(path, file.clone());
            }
            modules.insert(module.clone(), file.clone());
            let uses = Vec::new();
            let expands_items = item_macro_calls(&tokens);
            if expands_items {
                facade = false;
            }
            let source = Source { module, code, inline, defines, exported_macros, uses, facade, expands_items };
            sources.insert(file, source);
        }
        for source in sources.values_mut() {
            let tokens = tokenize(&source.code);
            source.uses = use_declarations(&tokens, &source.module, &source.inline);
        }
        Crate { sources, modules }
    }

    /// The module a position of `file` is in (inline modules included).
    fn scope_at(source: &Source, at: usize) -> Vec<String> {
        let mut scope = source.module.clone();
        let mut ranges: Vec<&(String, std::ops::Range<usize>)> =
            source.inline.iter().filter(|(_, r)| r.contains(&at)).collect();
        ranges.sort_by_key(|(_, r)| r.start);
        scope.extend(ranges.into_iter().map(|(n, _)| n.clone()));
        scope
    }

    /// `path` as written in `scope`, made absolute (from the crate root):
    /// `None` for a path into another crate.
    fn absolute(&self, scope: &[String], path: &[String]) -> Option<Vec<String>> {
        self.absolute_at(scope, path, 0)
    }

    fn absolute_at(&self, scope: &[String], path: &[String], depth: usize) -> Option<Vec<String>> {
        let first = path.first()?;
        let (mut out, rest): (Vec<String>, &[String]) = match first.as_str() {
            "crate" | "$crate" => (Vec::new(), &path[1..]),
            "self" => (scope.to_vec(), &path[1..]),
            "super" => {
                let mut out = scope.to_vec();
                let mut rest = path;
                while rest.first().is_some_and(|s| s == "super") {
                    out.pop();
                    rest = &rest[1..];
                }
                (out, rest)
            }
            name => {
                let mut child = scope.to_vec();
                child.push(name.to_owned());
                if self.modules.contains_key(&child) {
                    (scope.to_vec(), path)
                } else {
                    // A name a `use` of this scope brought in, or another crate.
                    let file = self.modules.get(scope)?;
                    let imported = self.sources[file].uses.iter().find(|u| u.name == *name && u.scope == scope)?;
                    if depth > 16 || imported.path.first() == Some(first) && imported.scope == scope {
                        return None;
                    }
                    let mut target = self.absolute_at(&imported.scope, &imported.path, depth + 1)?;
                    target.extend(path[1..].iter().cloned());
                    return Some(target);
                }
            }
        };
        out.extend(rest.iter().cloned());
        Some(out)
    }

    /// The file an absolute path leads to (see the module docs), or `Err`
    /// when it leads nowhere. `depth` bounds re-export chains.
    fn resolve(&self, path: &[String], depth: usize) -> Result<Option<String>, String> {
        if depth > 16 {
            return Err(format!("{} re-exports itself", path.join("::")));
        }
        let mut module: Vec<String> = Vec::new();
        for (i, segment) in path.iter().enumerate() {
            if segment.starts_with('$') && segment != "$crate" {
                // A macro's metavariable (`super::$name`): the module reached
                // so far, unless it is a facade, whose name cannot be known
                // until the macro expands (its other paths say the rest).
                let file = &self.modules[&module];
                return Ok((!self.sources[file].facade).then(|| file.clone()));
            }
            let mut child = module.clone();
            child.push(segment.clone());
            if self.modules.contains_key(&child) {
                module = child;
                continue;
            }
            let file = &self.modules[&module];
            let source = &self.sources[file];
            let rest = &path[i + 1..];
            // The crate root is read through like a facade even where it
            // defines a few items of its own: it is the crate's public face.
            if !source.facade && !module.is_empty() {
                let known = source.defines.contains(segment)
                    || source.expands_items
                    || source.uses.iter().any(|u| u.name == *segment || u.name == "*");
                if !known {
                    return Err(format!("{} leads nowhere: {file} has no {segment}", path.join("::")));
                }
                return Ok(Some(file.clone()));
            }
            // A facade: follow its re-export of the name.
            if let Some(import) = source.uses.iter().find(|u| u.name == *segment && u.scope == module) {
                let Some(mut target) = self.absolute(&import.scope, &import.path) else { return Ok(None) };
                target.extend(rest.iter().cloned());
                return self.resolve(&target, depth + 1);
            }
            for import in source.uses.iter().filter(|u| u.name == "*" && u.scope == module) {
                if let Some(mut target) = self.absolute(&import.scope, &import.path) {
                    target.push(segment.clone());
                    target.extend(rest.iter().cloned());
                    if let Ok(found) = self.resolve(&target, depth + 1) {
                        return Ok(found);
                    }
                }
            }
            if module.is_empty()
                && let Some((file, _)) = self.sources.iter().find(|(_, s)| s.exported_macros.contains(segment))
            {
                return Ok(Some(file.clone()));
            }
            if source.defines.contains(segment) {
                return Ok(Some(file.clone()));
            }
            return Err(format!("{} leads nowhere: the facade {file} has no {segment}", path.join("::")));
        }
        Ok(self.modules.get(&module).cloned())
    }

    fn graph(self) -> Result<Graph, String> {
        let mut graph = Graph::default();
        let mut unresolved = Vec::new();
        for (file, source) in &self.sources {
            graph.files.insert(file.clone());
            if source.facade {
                graph.facades.insert(file.clone());
            }
            let mut targets = BTreeSet::new();
            let mut add = |found: Result<Option<String>, String>| match found {
                Ok(Some(target)) => {
                    targets.insert(target);
                }
                Ok(None) => {}
                Err(e) => unresolved.push(e),
            };
            for u in &source.uses {
                let Some(path) = self.absolute(&u.scope, &u.path) else { continue };
                // A glob (`*`) leads to the module it reads from.
                add(self.resolve(&path, 0));
            }
            let tokens = tokenize(&source.code);
            for (at, path) in code_paths(&tokens, &source.uses) {
                let scope = Self::scope_at(source, at);
                let first = &path[0];
                let relative_root = !matches!(first.as_str(), "crate" | "$crate" | "self" | "super");
                if relative_root {
                    let mut child = scope.clone();
                    child.push(first.clone());
                    let module_alias = source.uses.iter().any(|u| u.name == *first && u.scope == scope);
                    if !self.modules.contains_key(&child) && !module_alias {
                        continue;
                    }
                }
                let Some(abs) = self.absolute(&scope, &path) else { continue };
                add(self.resolve(&abs, 0));
            }
            targets.remove(file);
            graph.edges.insert(file.clone(), targets);
        }
        if unresolved.is_empty() {
            Ok(graph)
        } else {
            unresolved.sort();
            unresolved.dedup();
            Err(unresolved.join("\n"))
        }
    }
}

/// `text` with every comment and string or character literal replaced by
/// spaces (newlines kept), so that what is left is code.
fn blank_comments_and_strings(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for b in &mut out[from..to.min(bytes.len())] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    };
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&b| b == b'\n').map_or(bytes.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            let mut j = i;
            while j < bytes.len() {
                if bytes[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if bytes[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if let Some(len) = raw_string_len(rest) {
            let prev_ident = i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
            if prev_ident {
                i += 1;
            } else {
                blank(&mut out, i, i + len);
                i += len;
            }
        } else if bytes[i] == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if bytes[i] == b'\'' {
            // A character literal ('a', '\n', '\u{..}', 'é') or a lifetime ('a).
            if rest.get(1) == Some(&b'\\') {
                let end = rest[2..].iter().position(|&b| b == b'\'').map_or(bytes.len(), |p| i + 2 + p + 1);
                blank(&mut out, i, end);
                i = end;
            } else {
                let c = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                if bytes.get(i + 1 + c) == Some(&b'\'') {
                    blank(&mut out, i, i + c + 2);
                    i += c + 2;
                } else {
                    i += 1;
                }
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The length of a raw string literal (`r"..."`, `r#"..."#`, `br".."`)
/// starting `rest`, if one does.
fn raw_string_len(rest: &[u8]) -> Option<usize> {
    let start = if rest.starts_with(b"br") {
        2
    } else if rest.starts_with(b"r") {
        1
    } else {
        return None;
    };
    let hashes = rest[start..].iter().take_while(|&&b| b == b'#').count();
    if rest.get(start + hashes) != Some(&b'"') {
        return None;
    }
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat_n(b'#', hashes));
    let body = start + hashes + 1;
    let end = rest[body..].windows(close.len()).position(|w| w == close.as_slice())?;
    Some(body + end + close.len())
}

/// A token of code: an identifier (`$crate` included) or one punctuation
/// mark (`::` as one).
#[derive(Clone, Debug)]
struct Token {
    text: String,
    at: usize,
}

fn is_ident(text: &str) -> bool {
    text.starts_with(|c: char| c.is_alphabetic() || c == '_' || c == '$')
}

fn tokenize(code: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut chars = code.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if c.is_whitespace() {
            continue;
        }
        if c.is_alphanumeric() || c == '_' || c == '$' {
            let mut end = at + c.len_utf8();
            while let Some(&(i, d)) = chars.peek() {
                if d.is_alphanumeric() || d == '_' {
                    end = i + d.len_utf8();
                    chars.next();
                } else {
                    break;
                }
            }
            tokens.push(Token { text: code[at..end].to_owned(), at });
        } else if c == ':' && chars.peek().is_some_and(|&(_, d)| d == ':') {
            chars.next();
            tokens.push(Token { text: "::".to_owned(), at });
        } else {
            tokens.push(Token { text: c.to_string(), at });
        }
    }
    tokens
}

/// True when a macro is invoked outside every block (where items go:
/// `name!(..);` at the top of the file), `macro_rules!` aside.
fn item_macro_calls(tokens: &[Token]) -> bool {
    let mut depth = 0usize;
    for (i, t) in tokens.iter().enumerate() {
        match t.text.as_str() {
            "{" => depth += 1,
            "}" => depth = depth.saturating_sub(1),
            "!" if depth == 0 && i > 0 => {
                let name = &tokens[i - 1].text;
                let opens = tokens.get(i + 1).is_some_and(|n| matches!(n.text.as_str(), "(" | "{" | "["));
                if opens && is_ident(name) && name != "macro_rules" {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

/// Inline modules (`mod name { .. }`) and the byte range of their braces.
fn inline_modules(tokens: &[Token]) -> Vec<(String, std::ops::Range<usize>)> {
    let mut found = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        if t.text != "mod" || tokens.get(i + 2).is_none_or(|b| b.text != "{") {
            continue;
        }
        let Some(name) = tokens.get(i + 1).filter(|n| is_ident(&n.text)) else { continue };
        let mut depth = 0usize;
        for close in &tokens[i + 2..] {
            match close.text.as_str() {
                "{" => depth += 1,
                "}" => {
                    depth -= 1;
                    if depth == 0 {
                        found.push((name.text.clone(), tokens[i + 2].at..close.at + 1));
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    found
}

/// Every `use` declaration, its tree expanded to leaves.
fn use_declarations(tokens: &[Token], module: &[String], inline: &[(String, std::ops::Range<usize>)]) -> Vec<Use> {
    let mut uses = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        if t.text != "use" {
            continue;
        }
        // `use` starts a declaration after `;`, a brace, an attribute's
        // `]`, `pub` or `pub(..)`; `+ use<'a>` in a bound is no import.
        let starts = i == 0 || matches!(tokens[i - 1].text.as_str(), ";" | "{" | "}" | "]" | "pub" | ")");
        if !starts || tokens.get(i + 1).is_some_and(|n| n.text == "<") {
            continue;
        }
        let end = tokens[i..].iter().position(|t| t.text == ";").map_or(tokens.len(), |p| i + p);
        let mut scope = module.to_vec();
        let mut containing: Vec<&(String, std::ops::Range<usize>)> =
            inline.iter().filter(|(_, r)| r.contains(&t.at)).collect();
        containing.sort_by_key(|(_, r)| r.start);
        scope.extend(containing.into_iter().map(|(n, _)| n.clone()));
        let mut leaves = Vec::new();
        let mut pos = i + 1;
        parse_tree(&tokens[..end], &mut pos, &[], &mut leaves);
        for (path, name) in leaves {
            uses.push(Use { name, scope: scope.clone(), path, at: t.at });
        }
    }
    uses
}

/// Parses one use tree at `pos`, appending its leaves (path, name).
fn parse_tree(tokens: &[Token], pos: &mut usize, prefix: &[String], leaves: &mut Vec<(Vec<String>, String)>) {
    let mut path = prefix.to_vec();
    if tokens.get(*pos).is_some_and(|t| t.text == "::") {
        // `use ::name`: another crate.
        *pos += 1;
        path.push("::".to_owned());
    }
    loop {
        let Some(t) = tokens.get(*pos) else { return };
        match t.text.as_str() {
            "{" => {
                *pos += 1;
                while tokens.get(*pos).is_some_and(|t| t.text != "}") {
                    parse_tree(tokens, pos, &path, leaves);
                    if tokens.get(*pos).is_some_and(|t| t.text == ",") {
                        *pos += 1;
                    }
                }
                *pos += 1;
                return;
            }
            "*" => {
                *pos += 1;
                leaves.push((path, "*".to_owned()));
                return;
            }
            text if is_ident(text) => {
                *pos += 1;
                if text == "self" && !path.is_empty() {
                    // `a::{self}`: the module `a` itself.
                } else {
                    path.push(text.to_owned());
                }
                if tokens.get(*pos).is_some_and(|t| t.text == "::") {
                    *pos += 1;
                    continue;
                }
                let mut name = path.last().cloned().unwrap_or_default();
                if tokens.get(*pos).is_some_and(|t| t.text == "as") {
                    name = tokens.get(*pos + 1).map(|t| t.text.clone()).unwrap_or_default();
                    *pos += 2;
                }
                if path.first().is_some_and(|f| f != "::") {
                    leaves.push((path, name));
                }
                return;
            }
            _ => {
                *pos += 1;
                return;
            }
        }
    }
}

/// The paths written in code outside `use` declarations: runs of
/// `ident::ident::..` not preceded by `::` or `.`, with where they start.
fn code_paths(tokens: &[Token], uses: &[Use]) -> Vec<(usize, Vec<String>)> {
    let in_use = |at: usize| uses.iter().any(|u| u.at == at);
    let mut skip_until = 0;
    let mut paths = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        if t.text == "use" && in_use(t.at) {
            skip_until = tokens[i..].iter().position(|t| t.text == ";").map_or(tokens.len(), |p| i + p);
        }
        if i < skip_until || !is_ident(&t.text) || tokens.get(i + 1).is_none_or(|n| n.text != "::") {
            i += 1;
            continue;
        }
        if i > 0 && matches!(tokens[i - 1].text.as_str(), "::" | ".") {
            i += 1;
            continue;
        }
        let mut path = vec![t.text.clone()];
        let mut j = i + 1;
        while tokens.get(j).is_some_and(|c| c.text == "::") && tokens.get(j + 1).is_some_and(|n| is_ident(&n.text)) {
            path.push(tokens[j + 1].text.clone());
            j += 2;
        }
        if path.len() > 1 {
            paths.push((t.at, path));
        }
        i = j;
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(files: &[(&str, &str)]) -> Result<Graph, String> {
        Crate::new(files.iter().map(|(f, t)| ((*f).to_owned(), (*t).to_owned())).collect()).graph()
    }

    #[test]
    fn a_circle_is_reported_with_its_path() {
        let g = graph(&[
            ("lib.rs", "mod a;\nmod b;\nmod c;\npub use a::A;\n"),
            ("a.rs", "use crate::b::B;\npub struct A;\n"),
            ("b.rs", "pub struct B(super::c::C);\n"),
            ("c.rs", "pub struct C(Option<crate::A>);\n"),
        ])
        .unwrap();
        assert_eq!(g.imports("c.rs"), BTreeSet::from(["a.rs"]), "lib.rs is a facade: read through");
        assert_eq!(g.cycles(), vec![vec!["a.rs", "b.rs", "c.rs", "a.rs"]]);
    }

    #[test]
    fn importing_through_a_module_depends_on_it() {
        let g = graph(&[
            ("lib.rs", "mod id;\nmod job;\nmod error;\n"),
            ("id.rs", "pub struct JobId;\n"),
            ("job.rs", "pub use crate::id::JobId;\npub struct Job;\n"),
            (
                "error.rs",
                "use crate::job::JobId;\n// crate::nowhere::X in a comment\nconst S: &str = \"crate::x::Y\";\n",
            ),
        ])
        .unwrap();
        assert_eq!(g.imports("error.rs"), BTreeSet::from(["job.rs"]));
        let layers: &[(&str, &[&str])] = &[("ground", &["id.rs", "error.rs"]), ("model", &["job.rs"])];
        assert_eq!(g.layer_violations(layers), vec!["error.rs (ground) imports job.rs (model)"]);
    }

    #[test]
    fn child_modules_super_and_inline_modules_resolve() {
        let g = graph(&[
            ("lib.rs", "pub mod w;\nmod low;\n"),
            ("low.rs", "pub fn f() {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n    use crate::w::pool::P;\n}\n"),
            ("w/mod.rs", "mod pool;\nmod pace;\npub use pool::P;\n"),
            ("w/pool.rs", "use super::pace::wait;\npub struct P;\nfn g() { crate::low::f(); wait(); }\n"),
            ("w/pace.rs", "pub fn wait() {}\n"),
        ])
        .unwrap();
        assert_eq!(g.imports("w/pool.rs"), BTreeSet::from(["low.rs", "w/pace.rs"]));
        assert_eq!(g.imports("low.rs"), BTreeSet::from(["w/pool.rs"]), "a test module's imports count");
        assert!(g.is_facade("w/mod.rs") && g.is_facade("lib.rs") && !g.is_facade("low.rs"));
        assert_eq!(g.cycles(), vec![vec!["low.rs", "w/pool.rs", "low.rs"]]);
    }

    #[test]
    fn macros_are_read_for_their_paths() {
        let g = graph(&[
            ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
            ("a.rs", "macro_rules! make { ($n:ident) => { pub struct $n(crate::c::C); }; }\nmake!(Made);\n"),
            ("b.rs", "pub struct B(crate::a::Made, crate::a::$x);\n"),
            ("c.rs", "pub struct C;\n"),
        ])
        .unwrap();
        assert_eq!(g.imports("a.rs"), BTreeSet::from(["c.rs"]), "the paths of a macro's body count");
        assert_eq!(g.imports("b.rs"), BTreeSet::from(["a.rs"]), "a name a macro makes is the file's");
    }

    #[test]
    fn a_path_that_leads_nowhere_is_an_error() {
        let got = graph(&[("lib.rs", "mod a;\n"), ("a.rs", "fn f() { crate::a::missing(); }\n")]);
        assert!(got.is_err_and(|e| e.contains("a.rs has no missing")));
    }
}
