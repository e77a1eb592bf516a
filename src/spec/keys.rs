//! One reading of a JSON document for every reader: keys that two parsers would read
//! differently are refused before moat parses the document.
//!
//! serde keeps the last of two equal map keys and ignores a key it does not know; Go's
//! `encoding/json`, which runsc, podman and containerd use, also takes the last duplicate
//! but matches a key to a struct field **case-insensitively** (with Unicode folding:
//! `"Capabilities"`, `"CAPABILITIES"`, even `"capabilitieſ"` are `capabilities` to Go). A
//! key moat ignores but runsc applies is a field the policy never saw. So, before the
//! typed parse:
//!
//! - a key that appears twice in one object is refused, at any depth, inside maps and
//!   inside fields moat does not model as much as in the fields it does;
//! - a key of a struct that is not one of its fields but folds (Go's way) to one of them
//!   is refused, but inside `linux.resources` (and an update's resources document):
//!   there it is taken as that field, with a warning ([`fold_resources`] renames it
//!   before the typed parse), so moat applies what runc applies (runc's update.bats
//!   writes `"CPU"` beside `"cpu"`): the field and its variants in one object are read in
//!   order into the field, as Go's decoder reads them (objects merged, anything else
//!   replaced). Map keys are never folded: podman sends both `Foo` and `foo`
//!   annotations, and `linux.sysctl`, `linux.resources.unified` and `linux.timeOffsets`
//!   are keyed by the kernel's case-sensitive names;
//! - any other unknown key is left alone (runc ignores it too).
//!
//! Which positions are structs and which are maps is not written down here: it is traced
//! once per type from moat's own serde types ([`Checked::shape`]), by running each type's
//! `Deserialize` against a deserializer that records the field names it asks for. Fields
//! moat keeps as opaque JSON (`serde_json::Value`) get a shape from
//! [`OPAQUE_SHAPES`] where one is known.
//!
//! The check is a second streaming pass over the bytes (no tree is built): ~21 µs for the
//! 10.5 KB config.json podman 4.3 writes, against ~110 µs for the typed parse
//! (`docs/performance.md`, "JSON key check").

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::OnceLock;

use serde::de::value::{BorrowedStrDeserializer, Error as TraceError};
use serde::de::{self, DeserializeOwned, DeserializeSeed, MapAccess, SeqAccess, Visitor};

/// The shape of a value as a type's `Deserialize` asks for it.
#[derive(Debug)]
pub enum Node {
    /// A scalar (bool, number, string).
    Leaf,
    /// JSON moat keeps as it is (`serde_json::Value`), with the runtime-spec shape of its
    /// content where [`OPAQUE_SHAPES`] knows one.
    Opaque(Option<Box<Node>>),
    /// A struct: its fields in declaration order, named as in the JSON.
    Struct(Vec<(&'static str, Node)>),
    /// A map with string keys: every value has the shape.
    Map(Box<Node>),
    /// An array: every element has the shape.
    Seq(Box<Node>),
}

/// What an unknown key holds: anything; only duplicates are looked for.
static ANY: Node = Node::Opaque(None);

/// `(struct, field, shape)`: see [`OPAQUE_SHAPES`].
pub type OpaqueShape = (&'static str, &'static str, fn() -> Node);

/// Fields moat keeps as opaque JSON whose content has a runtime-spec shape. Keys inside
/// them are checked like any struct's.
pub const OPAQUE_SHAPES: &[OpaqueShape] = &[
    ("Resources", "network", trace::<super::NetworkResources>),
    (
        "Resources",
        "rdma",
        trace::<BTreeMap<String, super::RdmaLimit>>,
    ),
];

/// A type whose JSON is checked before it is parsed; the shape is traced once.
pub trait Checked: DeserializeOwned {
    fn shape() -> &'static Node;
    /// Where the document starts (see [`Pos`]).
    const START: Pos;
}

/// Where in a document case variants of a field are taken as the field (see the module
/// doc): [`Pos::Folding`] below; the others say how far from `linux.resources` a walk is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pos {
    /// The top of a spec: `linux` leads on.
    Top,
    /// `linux`: `resources` leads on.
    Linux,
    /// Inside `linux.resources` (or a resources document).
    Folding,
    /// Anywhere else.
    Other,
}

impl Pos {
    fn enter(self, key: &str) -> Pos {
        match (self, key) {
            (Pos::Top, "linux") => Pos::Linux,
            (Pos::Linux, "resources") | (Pos::Folding, _) => Pos::Folding,
            _ => Pos::Other,
        }
    }
}

macro_rules! checked {
    ($($t:ty => $pos:expr),*) => {$(
        impl Checked for $t {
            fn shape() -> &'static Node {
                static SHAPE: OnceLock<Node> = OnceLock::new();
                SHAPE.get_or_init(trace::<$t>)
            }
            const START: Pos = $pos;
        }
    )*};
}

checked!(super::Spec => Pos::Top, super::Process => Pos::Other, super::Resources => Pos::Folding);

/// A key refused: where (a path like `process.capabilities` or `mounts[2]`, `top level`
/// for the document itself) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError {
    pub field: String,
    pub message: String,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// What [`check`] found besides refusals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Found {
    /// A case variant of a resources field is to be taken as the field
    /// ([`fold_resources`] before the typed parse).
    pub folds: bool,
    /// A struct holds a key that is none of its fields ([`unknown_keys`] names them).
    pub unknown: bool,
}

/// Checks `bytes` against `T`'s shape. JSON that does not parse is reported here too,
/// with serde_json's message: a check that stopped early would leave keys unchecked.
pub fn check<T: Checked>(bytes: &[u8]) -> Result<Found, KeyError> {
    check_shape(T::shape(), T::START, bytes)
}

pub fn check_shape(shape: &Node, start: Pos, bytes: &[u8]) -> Result<Found, KeyError> {
    let ctx = Ctx::default();
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let r = Walk {
        node: shape,
        ctx: &ctx,
        pos: start,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end());
    match r {
        Ok(()) => Ok(Found {
            folds: ctx.folds.get(),
            unknown: ctx.unknown.get(),
        }),
        Err(e) => {
            let mut trail = ctx.trail.into_inner();
            trail.reverse();
            let field = if trail.is_empty() {
                "top level".to_string()
            } else {
                let mut s = String::new();
                for seg in &trail {
                    match seg {
                        Seg::Index(i) => s.push_str(&format!("[{i}]")),
                        Seg::Key(k) => {
                            if !s.is_empty() {
                                s.push('.');
                            }
                            if !k.is_empty()
                                && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                            {
                                s.push_str(k);
                            } else {
                                s.push_str(&format!("{k:?}"));
                            }
                        }
                    }
                }
                s
            };
            let message = ctx.refused.into_inner().unwrap_or_else(|| e.to_string());
            Err(KeyError { field, message })
        }
    }
}

/// After [`check`] said so: the document with every case variant of a resources field
/// read as the field (what Go's decoder, and so runc, reads), and one warning line per
/// variant. Off the plain path: only a document with such a key comes here. The keys'
/// order matters (a later value for a field merges into or replaces an earlier one), so
/// the document is read in order first ([`Ordered`]).
pub fn fold_resources<T: Checked>(bytes: &[u8]) -> Result<(Vec<u8>, Vec<String>), KeyError> {
    let doc: Ordered = serde_json::from_slice(bytes).map_err(|e| KeyError {
        field: "syntax".into(),
        message: e.to_string(),
    })?;
    let mut warnings = Vec::new();
    let v = fold(doc, T::shape(), T::START, "", &mut warnings);
    let bytes = serde_json::to_vec(&v).map_err(|e| KeyError {
        field: "top level".into(),
        message: e.to_string(),
    })?;
    Ok((bytes, warnings))
}

/// A JSON value with its objects' keys in document order.
enum Ordered {
    Object(Vec<(String, Ordered)>),
    Array(Vec<Ordered>),
    Scalar(serde_json::Value),
}

impl<'de> de::Deserialize<'de> for Ordered {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Ordered, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, b: bool) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(b.into()))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(n.into()))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(n.into()))
            }
            fn visit_f64<E>(self, n: f64) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(n.into()))
            }
            fn visit_str<E>(self, s: &str) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(s.into()))
            }
            fn visit_unit<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(serde_json::Value::Null))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Ordered, A::Error> {
                let mut v = Vec::new();
                while let Some(x) = seq.next_element()? {
                    v.push(x);
                }
                Ok(Ordered::Array(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
                let mut v = Vec::new();
                while let Some((k, x)) = map.next_entry::<String, Ordered>()? {
                    v.push((k, x));
                }
                Ok(Ordered::Object(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// `doc` as a plain value, each case variant of a struct's field under [`Pos::Folding`]
/// read as the field, in order.
fn fold(
    doc: Ordered,
    node: &Node,
    pos: Pos,
    path: &str,
    out: &mut Vec<String>,
) -> serde_json::Value {
    let node = match node {
        Node::Opaque(Some(inner)) => inner,
        n => n,
    };
    let join = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match doc {
        Ordered::Scalar(v) => v,
        Ordered::Array(items) => {
            let (child, pos) = match node {
                Node::Seq(c) => (
                    &**c,
                    if pos == Pos::Folding {
                        Pos::Folding
                    } else {
                        Pos::Other
                    },
                ),
                _ => (&ANY, Pos::Other),
            };
            serde_json::Value::Array(
                items
                    .into_iter()
                    .enumerate()
                    .map(|(i, x)| fold(x, child, pos, &format!("{path}[{i}]"), out))
                    .collect(),
            )
        }
        Ordered::Object(entries) => {
            let mut map = serde_json::Map::new();
            for (k, x) in entries {
                let (name, child) = match node {
                    Node::Struct(fields) => match fields.iter().find(|(f, _)| *f == k) {
                        Some((f, c)) => (f.to_string(), c),
                        None => match fields.iter().find(|(f, _)| go_fold_eq(&k, f)) {
                            Some((f, c)) if pos == Pos::Folding => {
                                out.push(format!(
                                    "{}: {k:?} taken as {f:?} (keys differ only in case; runc's \
                                     decoder matches them so)",
                                    if path.is_empty() { "top level" } else { path }
                                ));
                                (f.to_string(), c)
                            }
                            _ => (k.clone(), &ANY),
                        },
                    },
                    Node::Map(c) => (k.clone(), &**c),
                    _ => (k.clone(), &ANY),
                };
                let v = fold(x, child, pos.enter(&name), &join(&name), out);
                let merged = match map.remove(&name) {
                    Some(earlier) => go_merge(earlier, v),
                    None => v,
                };
                map.insert(name, merged);
            }
            serde_json::Value::Object(map)
        }
    }
}

/// A later value for a field Go's decoder already filled: an object is decoded into the
/// earlier one (its keys merged, recursively), anything else replaces it.
fn go_merge(earlier: serde_json::Value, later: serde_json::Value) -> serde_json::Value {
    match (earlier, later) {
        (serde_json::Value::Object(mut a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                let v = match a.remove(&k) {
                    Some(e) => go_merge(e, v),
                    None => v,
                };
                a.insert(k, v);
            }
            serde_json::Value::Object(a)
        }
        (_, later) => later,
    }
}

/// After [`check`] found one: the path of every key of `bytes` that is no field of the
/// struct holding it (`linux.futureField`, `mounts[2].foo`), in document order; a case
/// variant [`check`] took as its field is none. Off the plain path.
pub fn unknown_keys<T: Checked>(bytes: &[u8]) -> Vec<String> {
    fn walk(v: &serde_json::Value, node: &Node, pos: Pos, path: &str, out: &mut Vec<String>) {
        let node = match node {
            Node::Opaque(Some(inner)) => inner,
            n => n,
        };
        match (v, node) {
            (serde_json::Value::Array(items), Node::Seq(c)) => {
                for (i, x) in items.iter().enumerate() {
                    walk(x, c, Pos::Other, &format!("{path}[{i}]"), out);
                }
            }
            (serde_json::Value::Object(m), Node::Struct(fields)) => {
                for (k, x) in m {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    let field = fields.iter().find(|(f, _)| f == k).or_else(|| {
                        fields
                            .iter()
                            .find(|(f, _)| pos == Pos::Folding && go_fold_eq(k, f))
                    });
                    match field {
                        Some((_, c)) => walk(x, c, pos.enter(k), &p, out),
                        None => out.push(p),
                    }
                }
            }
            (serde_json::Value::Object(m), Node::Map(c)) => {
                for (k, x) in m {
                    walk(x, c, pos.enter(k), &format!("{path}.{k}"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(bytes) {
        walk(&v, T::shape(), T::START, "", &mut out);
    }
    out
}

/// Every position of `T`'s shape with its JSON path (an array's elements named with `[]`,
/// a map's values with `{}`), outermost first.
pub fn positions<T: Checked>() -> Vec<(String, &'static Node)> {
    fn walk(n: &'static Node, path: &str, out: &mut Vec<(String, &'static Node)>) {
        let join = |k: &str| {
            if path.is_empty() {
                k.to_string()
            } else {
                format!("{path}.{k}")
            }
        };
        match n {
            Node::Leaf | Node::Opaque(_) => {}
            Node::Struct(fields) => fields.iter().for_each(|(k, c)| {
                out.push((join(k), c));
                walk(c, &join(k), out)
            }),
            Node::Map(c) => walk(c, &join("{}"), out),
            Node::Seq(c) => walk(c, &format!("{path}[]"), out),
        }
    }
    let mut out = Vec::new();
    walk(T::shape(), "", &mut out);
    out
}

/// The JSON paths of the fields `T` keeps as opaque JSON (`linux.resources.network`);
/// an opaque value inside an array or map is named with `[]` or `{}`.
pub fn opaque_fields<T: Checked>() -> Vec<String> {
    positions::<T>()
        .into_iter()
        .filter(|(_, n)| matches!(n, Node::Opaque(_)))
        .map(|(p, _)| p)
        .collect()
}

/// Go's `encoding/json` match of a key to an (ASCII) field name: equal under Unicode
/// simple case folding. The only non-ASCII characters that fold to ASCII letters are
/// the Kelvin sign (k) and the long s (s).
pub fn go_fold_eq(key: &str, field: &str) -> bool {
    let mut f = field.bytes();
    for c in key.chars() {
        let c = match c {
            '\u{212A}' => 'k',
            '\u{017F}' => 's',
            c => c.to_ascii_lowercase(),
        };
        match f.next() {
            Some(b) if c.is_ascii() && b.to_ascii_lowercase() == c as u8 => {}
            _ => return false,
        }
    }
    f.next().is_none()
}

// ---- the check: a streaming walk over serde_json's events -------------------------

#[derive(Default)]
struct Ctx {
    /// Why the walk stopped, when it was a refusal (not a syntax error).
    refused: RefCell<Option<String>>,
    /// A case variant of a resources field was seen (to be renamed).
    folds: std::cell::Cell<bool>,
    /// A key that is no field of its struct was seen.
    unknown: std::cell::Cell<bool>,
    /// The path to the failure, innermost first, filled while the error unwinds.
    trail: RefCell<Vec<Seg>>,
}

enum Seg {
    Key(String),
    Index(usize),
}

impl Ctx {
    fn refuse<E: de::Error>(&self, message: String) -> E {
        *self.refused.borrow_mut() = Some(message);
        E::custom("refused")
    }
}

struct Walk<'s, 'c> {
    node: &'s Node,
    ctx: &'c Ctx,
    pos: Pos,
}

impl<'de> DeserializeSeed<'de> for Walk<'_, '_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

/// The keys seen in one object: a short list, a set for big maps.
enum Seen<'de> {
    Few(Vec<Cow<'de, str>>),
    Many(HashSet<Cow<'de, str>>),
}

impl<'de> Seen<'de> {
    /// False when `k` was already there.
    fn insert(&mut self, k: Cow<'de, str>) -> bool {
        match self {
            Seen::Few(v) => {
                if v.contains(&k) {
                    return false;
                }
                v.push(k);
                if v.len() > 32 {
                    *self = Seen::Many(std::mem::take(v).into_iter().collect());
                }
                true
            }
            Seen::Many(s) => s.insert(k),
        }
    }
}

impl<'de> Visitor<'de> for Walk<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let elem = match self.node {
            Node::Seq(e) => e,
            Node::Opaque(Some(s)) => match &**s {
                Node::Seq(e) => e,
                _ => &ANY,
            },
            _ => &ANY,
        };
        let mut i = 0;
        loop {
            match seq.next_element_seed(Walk {
                node: elem,
                ctx: self.ctx,
                pos: if self.pos == Pos::Folding {
                    Pos::Folding
                } else {
                    Pos::Other
                },
            }) {
                Ok(Some(())) => i += 1,
                Ok(None) => return Ok(()),
                Err(e) => {
                    self.ctx.trail.borrow_mut().push(Seg::Index(i));
                    return Err(e);
                }
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let node = match self.node {
            Node::Opaque(Some(s)) => s,
            n => n,
        };
        let mut seen = Seen::Few(Vec::new());
        while let Some(key) = map.next_key_seed(KeySeed)? {
            // The error names the object (the trail), the message the key.
            if !seen.insert(key.clone()) {
                return Err(self.ctx.refuse(format!("duplicate key {key:?}; refused")));
            }
            let child = match node {
                Node::Struct(fields) => match fields.iter().find(|(f, _)| *f == key) {
                    Some((_, c)) => c,
                    None => match fields.iter().find(|(f, _)| go_fold_eq(&key, f)) {
                        // Taken as the field (renamed before the typed parse; the field
                        // and its variants in one object are decoded in order into it, as
                        // Go does: objects merged, anything else replaced).
                        Some((_, c)) if self.pos == Pos::Folding => {
                            self.ctx.folds.set(true);
                            c
                        }
                        Some((f, _)) => {
                            return Err(self.ctx.refuse(format!(
                                "{key:?} differs only in case from {f:?}; refused"
                            )))
                        }
                        None => {
                            self.ctx.unknown.set(true);
                            &ANY
                        }
                    },
                },
                Node::Map(c) => c,
                _ => &ANY,
            };
            if let Err(e) = map.next_value_seed(Walk {
                node: child,
                ctx: self.ctx,
                pos: self.pos.enter(&key),
            }) {
                self.ctx.trail.borrow_mut().push(Seg::Key(key.into_owned()));
                return Err(e);
            }
        }
        Ok(())
    }
}

/// A key, borrowed from the input unless it had escapes.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(KeySeed)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string key")
    }
    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(s))
    }
    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(s.to_owned()))
    }
    fn visit_string<E>(self, s: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(s))
    }
}

// ---- the trace: a type's shape from its Deserialize impl --------------------------

/// The shape of `T`: its `Deserialize` is run against a deserializer that hands every
/// struct all its fields, every array one element and every map one entry, with zero
/// scalars, and records what was asked for.
pub fn trace<T: DeserializeOwned>() -> Node {
    let mut n = Node::Leaf;
    T::deserialize(Tracer { out: &mut n }).expect("moat's spec types can be traced");
    n
}

struct Tracer<'a> {
    out: &'a mut Node,
}

macro_rules! leaf {
    ($($method:ident => $visit:ident($v:expr)),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, v: V) -> Result<V::Value, TraceError> {
            *self.out = Node::Leaf;
            v.$visit($v)
        }
    )*};
}

impl<'de> de::Deserializer<'de> for Tracer<'_> {
    type Error = TraceError;

    /// Only self-describing types ask for "anything": `serde_json::Value`.
    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, TraceError> {
        *self.out = Node::Opaque(None);
        v.visit_unit()
    }
    fn deserialize_ignored_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, TraceError> {
        self.deserialize_any(v)
    }

    leaf! {
        deserialize_bool => visit_bool(false),
        deserialize_i8 => visit_i64(0),
        deserialize_i16 => visit_i64(0),
        deserialize_i32 => visit_i64(0),
        deserialize_i64 => visit_i64(0),
        deserialize_u8 => visit_u64(0),
        deserialize_u16 => visit_u64(0),
        deserialize_u32 => visit_u64(0),
        deserialize_u64 => visit_u64(0),
        deserialize_f32 => visit_f64(0.0),
        deserialize_f64 => visit_f64(0.0),
        deserialize_char => visit_char('x'),
        deserialize_str => visit_borrowed_str(""),
        deserialize_string => visit_borrowed_str(""),
        deserialize_identifier => visit_borrowed_str(""),
        deserialize_bytes => visit_borrowed_bytes(b""),
        deserialize_byte_buf => visit_borrowed_bytes(b""),
    }

    fn deserialize_unit<V: Visitor<'de>>(self, v: V) -> Result<V::Value, TraceError> {
        *self.out = Node::Leaf;
        v.visit_unit()
    }
    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        v: V,
    ) -> Result<V::Value, TraceError> {
        self.deserialize_unit(v)
    }
    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, TraceError> {
        // null is accepted wherever an option is; the shape is the content's.
        v.visit_some(self)
    }
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        v: V,
    ) -> Result<V::Value, TraceError> {
        v.visit_newtype_struct(self)
    }
    fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value, TraceError> {
        let mut one = One::default();
        let r = v.visit_seq(&mut one)?;
        *self.out = Node::Seq(Box::new(one.node.unwrap_or(Node::Leaf)));
        Ok(r)
    }
    fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Result<V::Value, TraceError> {
        let mut one = One::default();
        let r = v.visit_map(&mut one)?;
        *self.out = Node::Map(Box::new(one.node.unwrap_or(Node::Leaf)));
        Ok(r)
    }
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, TraceError> {
        let mut s = Fields {
            name,
            fields,
            i: 0,
            nodes: Vec::with_capacity(fields.len()),
        };
        let r = v.visit_map(&mut s)?;
        *self.out = Node::Struct(fields.iter().copied().zip(s.nodes).collect());
        Ok(r)
    }
    fn deserialize_tuple<V: Visitor<'de>>(self, _: usize, _: V) -> Result<V::Value, TraceError> {
        Err(de::Error::custom("tuples are not traced"))
    }
    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: usize,
        _: V,
    ) -> Result<V::Value, TraceError> {
        Err(de::Error::custom("tuple structs are not traced"))
    }
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        _: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, TraceError> {
        Err(de::Error::custom(format!("enum {name} is not traced")))
    }
}

/// One element of an array, or one entry (key "") of a map.
#[derive(Default)]
struct One {
    node: Option<Node>,
    keyed: bool,
}

impl<'de> SeqAccess<'de> for One {
    type Error = TraceError;
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, TraceError> {
        if self.node.is_some() {
            return Ok(None);
        }
        let mut n = Node::Leaf;
        let v = seed.deserialize(Tracer { out: &mut n })?;
        self.node = Some(n);
        Ok(Some(v))
    }
}

impl<'de> MapAccess<'de> for One {
    type Error = TraceError;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, TraceError> {
        if std::mem::replace(&mut self.keyed, true) {
            return Ok(None);
        }
        seed.deserialize(BorrowedStrDeserializer::new("")).map(Some)
    }
    fn next_value_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<T::Value, TraceError> {
        let mut n = Node::Leaf;
        let v = seed.deserialize(Tracer { out: &mut n })?;
        self.node = Some(n);
        Ok(v)
    }
}

/// Every field of a struct, in order.
struct Fields {
    name: &'static str,
    fields: &'static [&'static str],
    i: usize,
    nodes: Vec<Node>,
}

impl<'de> MapAccess<'de> for Fields {
    type Error = TraceError;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, TraceError> {
        match self.fields.get(self.i) {
            None => Ok(None),
            Some(f) => seed.deserialize(BorrowedStrDeserializer::new(f)).map(Some),
        }
    }
    fn next_value_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<T::Value, TraceError> {
        let field = self.fields[self.i];
        self.i += 1;
        let mut n = Node::Leaf;
        let v = seed.deserialize(Tracer { out: &mut n })?;
        if matches!(n, Node::Opaque(None)) {
            if let Some((_, _, shape)) = OPAQUE_SHAPES
                .iter()
                .find(|(s, f, _)| *s == self.name && *f == field)
            {
                n = Node::Opaque(Some(Box::new(shape())));
            }
        }
        self.nodes.push(n);
        Ok(v)
    }
}

#[cfg(test)]
mod tests;
