//! ABI golden test: the layout of everything a plugin library and the host
//! exchange, printed as text and compared with `tests/abi_layout.txt`.
//!
//! abi_stable checks these layouts when a library is loaded, so any change
//! here is a change of the plugin ABI: old plugins stop loading (or, for
//! additions after a `last_prefix_field`, keep loading). This test makes
//! such a change visible in review instead of accidental. After an
//! intentional change, run `UPDATE_GOLDEN=1 cargo test -p blis-plugin-api
//! --test abi_layout` and commit the new file.
//!
//! The text is built by walking `<T as StableAbi>::LAYOUT` from the roots
//! (the root module and the three policy objects, plus the views), breadth
//! first, each type printed once. It holds what abi_stable compares — type
//! names, packages, compatible versions, sizes, alignments, repr, generics,
//! fields with their types and lifetimes, function pointer signatures, enum
//! variants and discriminants, prefix-type boundaries — and deliberately not
//! what it does not (source lines, module paths), since `TypeLayout`'s own
//! `Display` prints line numbers and any edit moving a line would break it.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use blis_plugin_api::abi_stable::library::RootModule;
use blis_plugin_api::abi_stable::std_types::UTypeId;
use blis_plugin_api::abi_stable::type_layout::{
    TLData, TLField, TLFields, TLFunction, Tag, TypeLayout,
};
use blis_plugin_api::abi_stable::StableAbi;
use blis_plugin_api::{
    AdmissionBox, ClusterState, ClusterView, FilterBox, InstanceSnapshot, PickerBox, PluginModRef,
    RequestEvent, RequestView, RouterBox, ScorerBox,
};

/// The roots of the walk, with the names a reader knows them by.
fn roots() -> Vec<(&'static str, &'static TypeLayout)> {
    vec![
        ("PluginModRef", <PluginModRef as StableAbi>::LAYOUT),
        ("AdmissionBox", <AdmissionBox as StableAbi>::LAYOUT),
        ("RouterBox", <RouterBox as StableAbi>::LAYOUT),
        ("ScorerBox", <ScorerBox as StableAbi>::LAYOUT),
        ("RequestView", <RequestView<'static> as StableAbi>::LAYOUT),
        ("ClusterView", <ClusterView<'static> as StableAbi>::LAYOUT),
        ("InstanceSnapshot", <InstanceSnapshot as StableAbi>::LAYOUT),
        // ABI 0.2 additions (also reachable from the roots above).
        ("FilterBox", <FilterBox as StableAbi>::LAYOUT),
        ("PickerBox", <PickerBox as StableAbi>::LAYOUT),
        ("ClusterState", <ClusterState<'static> as StableAbi>::LAYOUT),
        ("RequestEvent", <RequestEvent<'static> as StableAbi>::LAYOUT),
    ]
}

/// Breadth-first walk over type layouts, naming each type once.
///
/// abi_stable's printed names omit type parameters that only appear in
/// fields (`RResult<bool, PolicyError>` prints as `RResult`), so distinct
/// types can share a name; the second one seen is `RResult #2`, and so on.
/// The walk order is fixed (roots, then fields in order), so the numbering is
/// stable.
#[derive(Default)]
struct Walk {
    names: HashMap<UTypeId, String>,
    taken: HashMap<String, usize>,
    queue: Vec<&'static TypeLayout>,
}

impl Walk {
    /// The name of `layout`, queueing it for printing on first sight.
    fn name(&mut self, layout: &'static TypeLayout) -> String {
        let id = layout.get_utypeid();
        if let Some(n) = self.names.get(&id) {
            return n.clone();
        }
        let base = tidy(&layout.full_type().to_string());
        let count = self.taken.entry(base.clone()).or_insert(0);
        *count += 1;
        let name = if *count == 1 {
            base
        } else {
            format!("{base} #{count}")
        };
        self.names.insert(id, name.clone());
        self.queue.push(layout);
        name
    }

    fn field(&mut self, out: &mut String, indent: &str, f: &TLField) {
        let ty = self.name(f.layout());
        write!(out, "{indent}{}: {ty}", f.name()).unwrap();
        let lifetimes = f.lifetime_indices();
        if !lifetimes.as_slice().is_empty() {
            write!(out, "  lifetimes {:?}", lifetimes.as_slice()).unwrap();
        }
        writeln!(out, "  access {:?}", f.field_accessor()).unwrap();
        for func in f.function_range().iter() {
            let sig = self.function(&func);
            writeln!(out, "{indent}    {sig}").unwrap();
        }
    }

    fn fields(&mut self, out: &mut String, indent: &str, fields: TLFields) {
        for f in fields.iter() {
            self.field(out, indent, &f);
        }
    }

    /// `fn name(param: Type, …) -> Ret`, with qualifiers and lifetimes.
    fn function(&mut self, func: &TLFunction) -> String {
        // abi_stable 0.11 stores the names comma-terminated ("a,b,"), though
        // its docs say ';'-separated: accept both.
        let names: Vec<&str> = func
            .param_names
            .as_str()
            .split([',', ';'])
            .filter(|s| !s.is_empty())
            .collect();
        let params: Vec<String> = func
            .param_type_layouts
            .iter()
            .enumerate()
            .map(|(i, ctor)| {
                let ty = self.name(ctor());
                match names.get(i) {
                    Some(n) => format!("{n}: {ty}"),
                    None => ty,
                }
            })
            .collect();
        let ret = match func.return_type_layout() {
            Some(ctor) => self.name(ctor()),
            None => "()".to_string(),
        };
        let mut s = String::new();
        if func.fn_qualifs.is_unsafe() {
            s.push_str("unsafe ");
        }
        write!(s, "fn {}(", func.name).unwrap();
        s.push_str(&params.join(", "));
        write!(s, ") -> {ret}").unwrap();
        if !func.bound_lifetimes.is_empty() {
            write!(s, "  for<{}>", func.bound_lifetimes).unwrap();
        }
        let lifetimes = func.paramret_lifetime_indices;
        if !lifetimes.as_slice().is_empty() {
            write!(s, "  lifetimes {:?}", lifetimes.as_slice()).unwrap();
        }
        s
    }

    /// One type's entry.
    fn entry(&mut self, out: &mut String, layout: &'static TypeLayout) {
        let name = self.name(layout);
        let (package, version) = layout.item_info().package_and_version();
        writeln!(
            out,
            "\n== {name}\n   package {package} {}, size {}, align {}, repr {:?}{}",
            compatible_version(version),
            layout.size(),
            layout.alignment(),
            layout.repr_attr(),
            if layout.is_nonzero() {
                ", non-zero"
            } else {
                ""
            },
        )
        .unwrap();

        let generics = layout.generics();
        let lifetimes: Vec<&str> = generics.lifetimes().collect();
        let types: Vec<String> = generics
            .type_params()
            .iter()
            .map(|ctor| self.name(ctor()))
            .collect();
        let consts: Vec<String> = generics
            .const_params()
            .iter()
            .map(|c| format!("{c:?}"))
            .collect();
        if !(lifetimes.is_empty() && types.is_empty() && consts.is_empty()) {
            writeln!(
                out,
                "   generics: lifetimes [{}], types [{}], consts [{}]",
                lifetimes.join(", "),
                types.join(", "),
                consts.join(", ")
            )
            .unwrap();
        }
        let tag = layout.tag();
        if *tag != Tag::null() {
            writeln!(out, "   tag {tag:?}").unwrap();
        }
        if let Some(checks) = layout.extra_checks() {
            let text = checks.to_string();
            writeln!(out, "   extra checks: {}", text.trim().replace('\n', " / ")).unwrap();
        }
        let phantom = layout.phantom_fields();
        if !phantom.is_empty() {
            writeln!(out, "   phantom fields:").unwrap();
            self.fields(out, "     ", phantom);
        }

        match layout.data() {
            TLData::Primitive(p) => writeln!(out, "   primitive {p:?}").unwrap(),
            TLData::Opaque => writeln!(out, "   opaque").unwrap(),
            TLData::Struct { fields } => {
                writeln!(out, "   struct").unwrap();
                self.fields(out, "     ", fields);
            }
            TLData::Union { fields } => {
                writeln!(out, "   union").unwrap();
                self.fields(out, "     ", fields);
            }
            TLData::Enum(e) => {
                writeln!(
                    out,
                    "   enum, discriminants {:?}, {}",
                    e.discriminants,
                    match e.exhaustiveness.as_nonexhaustive() {
                        None => "exhaustive".to_string(),
                        Some(ne) => format!("non-exhaustive {ne:?}"),
                    }
                )
                .unwrap();
                let all: Vec<TLField> = e.fields.iter().collect();
                let mut next = 0;
                for (variant, &count) in e.variant_names_iter().zip(e.field_count.iter()) {
                    writeln!(out, "     variant {variant}").unwrap();
                    let end = (next + usize::from(count)).min(all.len());
                    for f in &all[next..end] {
                        self.field(out, "       ", f);
                    }
                    next = end;
                }
            }
            TLData::PrefixType(p) => {
                let accessible: Vec<String> = p
                    .accessible_fields
                    .iter()
                    .take(p.fields.len())
                    .map(|a| format!("{a:?}"))
                    .collect();
                writeln!(
                    out,
                    "   prefix type, first suffix field {}, conditional fields {:b}, accessible [{}]",
                    p.first_suffix_field,
                    p.conditional_prefix_fields.bits(),
                    accessible.join(", ")
                )
                .unwrap();
                self.fields(out, "     ", p.fields);
            }
        }
    }
}

/// abi_stable's type name with its stray spaces removed
/// (`PhantomData<&'a  u64 >` → `PhantomData<&'a u64>`).
fn tidy(name: &str) -> String {
    name.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace(" >", ">")
        .replace(" ,", ",")
}

/// The part of a version abi_stable requires to match: `0.minor` before
/// 1.0, `major` after (so a patch release of a dependency is no change).
fn compatible_version(version: &str) -> String {
    let mut parts = version.split('.');
    match (parts.next(), parts.next()) {
        (Some("0"), Some(minor)) => format!("0.{minor}"),
        (Some(major), _) => major.to_string(),
        _ => version.to_string(),
    }
}

/// The whole golden text.
fn layout_text() -> String {
    let mut out = String::new();
    writeln!(
        out,
        "# blis plugin ABI layout (generated by plugin-api/tests/abi_layout.rs;\n\
         # rewrite with UPDATE_GOLDEN=1 after an intentional ABI change)\n\
         plugin ABI {}; root module: name {}, base name {}, abi_stable version line {}, symbol {}",
        blis_plugin_api::ABI_VERSION,
        PluginModRef::NAME,
        PluginModRef::BASE_NAME,
        compatible_version(PluginModRef::VERSION_STRINGS.version.as_str()),
        blis_plugin_api::ROOT_MODULE_SYMBOL,
    )
    .unwrap();
    let mut walk = Walk::default();
    let mut root_names = Vec::new();
    for (label, layout) in roots() {
        let name = walk.name(layout);
        root_names.push(format!("{label} = {name}"));
    }
    writeln!(out, "roots: {}", root_names.join("; ")).unwrap();
    let mut i = 0;
    while i < walk.queue.len() {
        let layout = walk.queue[i];
        walk.entry(&mut out, layout);
        i += 1;
    }
    out
}

#[test]
fn abi_layout_matches_golden_file() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/abi_layout.txt");
    let got = layout_text();
    // Printing twice gives the same text (no addresses, no hash order).
    assert_eq!(got, layout_text(), "the layout text is not deterministic");

    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v != "0") {
        std::fs::write(&path, &got).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    if expected != got {
        // The whole new text, to diff against the golden file.
        let got_path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("abi_layout.got.txt");
        std::fs::write(&got_path, &got).unwrap();
        let (e, g): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), got.lines().collect());
        let first = e
            .iter()
            .zip(&g)
            .position(|(a, b)| a != b)
            .unwrap_or(e.len().min(g.len()));
        let from = first.saturating_sub(6);
        let window =
            |lines: &[&str]| lines[from.min(lines.len())..(first + 12).min(lines.len())].join("\n");
        panic!(
            "\nThe plugin ABI layout differs from {} from line {} on.\n\
             If the change is intended, it is an ABI change: rerun with UPDATE_GOLDEN=1, \
             review and commit the file (see the evolution rule in plugin-api/src/abi.rs).\n\
             The whole new text is in {}.\n\
             \n========== expected (from line {}) ==========\n{}\
             \n============ got (from line {}) =============\n{}\n",
            path.display(),
            first + 1,
            got_path.display(),
            from + 1,
            window(&e),
            from + 1,
            window(&g),
        );
    }
}
