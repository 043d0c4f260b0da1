//! Request objects as Python dicts for `x.name`: Jinja2 tries `getattr(x, name)` before
//! `x[name]`, so `x.items`, `x.keys`, `x.values`, `x.get`, `x.copy` are the dict's methods
//! (callable, truthy, without attributes) whatever keys `x` holds, and the mutating ones
//! (`x.update`, `x.pop`, ...) are undefined in transformers' immutable sandbox. Command R+'s tool-use
//! template writes `json_spec.items` for an array's item schema, and transformers prints
//! `List[Union[]]` for it, not the item type.
//!
//! Only `x.name` changes: `x["items"]` still reads the key, `x.items()` still calls the method,
//! and filters with `attribute=` (minijinja reads those through the same lookup as `x.name`, Jinja2
//! through `x[name]` first) now see the method for these names too. Dicts the template builds
//! itself (`{...}`, `dict()`) are minijinja's and keep reading the key.
//!
//! Also transformers' `dict` and `namespace` globals: `dict(*args, **kwargs)` and
//! `dict.fromkeys(keys, value)` as Python builds them (minijinja's `dict` takes keywords and one
//! mapping only, so `dict([('a', 1)])` failed), and a `namespace(...)` refusing attribute names
//! that start with `_` (transformers' `TemplateNamespace`, a sandbox rule).

use std::sync::Arc;

use minijinja::value::{
    from_args, ArgType, Enumerator, Kwargs, Object, ObjectExt, ObjectRepr, ValueKind, ValueOrKwargs,
};
use minijinja::{Error, ErrorKind, State, Value};

/// A mapping from the request (messages, tools, documents, kwargs).
#[derive(Debug)]
pub struct PyDict(pub Value);

/// Whether `x.name` differs from `x["name"]` on a [`PyDict`] (see `Analysis::reads_dict_methods`).
pub(crate) fn is_method_name(name: &str) -> bool {
    SAFE_METHODS.contains(&name) || MUTATING_METHODS.contains(&name)
}

/// Whether `value` is a Python dict: a mapping from the request (a plain map or a [`PyDict`]) or
/// one the template built (`{...}`, `dict()`). A `namespace()`, also a map to minijinja, is not.
pub(crate) fn is_dict(value: &Value) -> bool {
    value
        .downcast_object_ref::<indexmap::IndexMap<Value, Value>>()
        .is_some()
        || value.downcast_object_ref::<PyDict>().is_some()
}

/// Methods the sandbox allows on a dict.
const SAFE_METHODS: &[&str] = &["copy", "fromkeys", "get", "items", "keys", "values"];
/// Methods the immutable sandbox hides (`modifies_known_mutable`).
const MUTATING_METHODS: &[&str] = &["clear", "pop", "popitem", "setdefault", "update"];

impl Object for PyDict {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Map
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        self.0.as_object()?.get_value(key)
    }

    fn get_value_by_str(self: &Arc<Self>, key: &str) -> Option<Value> {
        if let Some(name) = SAFE_METHODS.iter().find(|m| **m == key) {
            return Some(BoundMethod::value(
                Value::from_dyn_object(self.clone()),
                name,
            ));
        }
        if MUTATING_METHODS.contains(&key) {
            return None;
        }
        self.get_value(&Value::from(key))
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        self.mapped_enumerator(|this| match this.0.try_iter() {
            Ok(keys) => Box::new(keys),
            Err(_) => Box::new(std::iter::empty()),
        })
    }

    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        self.0.len()
    }
}

/// `getattr(d, name)` on a dict: its method, or undefined (for keys and for the methods the
/// sandbox hides).
pub(crate) fn dict_method(dict: &Value, name: &str) -> Value {
    match SAFE_METHODS.iter().find(|m| **m == name) {
        Some(m) => BoundMethod::value(dict.clone(), m),
        None => Value::UNDEFINED,
    }
}

/// `x.items` without the call: calling it calls the method.
#[derive(Debug)]
pub struct BoundMethod {
    receiver: Value,
    name: &'static str,
}

impl BoundMethod {
    /// `receiver.name` as a value; calling it calls `receiver.name(...)`.
    pub(crate) fn value(receiver: Value, name: &'static str) -> Value {
        Value::from_object(BoundMethod { receiver, name })
    }
}

impl Object for BoundMethod {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }

    fn call(self: &Arc<Self>, state: &mut State<'_, '_>, args: &[Value]) -> Result<Value, Error> {
        self.receiver.call_method(state, self.name, args)
    }

    fn render(self: &Arc<Self>, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result
    where
        Self: Sized + 'static,
    {
        // Python adds the object's address, which no prompt can match anyway.
        let owner = match self.receiver.kind() {
            minijinja::value::ValueKind::String => "str",
            minijinja::value::ValueKind::Seq => "list",
            _ => "dict",
        };
        write!(f, "<built-in method {} of {owner} object>", self.name)
    }
}

fn type_error(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, message.into())
}

/// A dict key: Python refuses lists and dicts (unhashable).
fn hashable(key: Value) -> Result<Value, Error> {
    match key.kind() {
        ValueKind::Map => Err(type_error("unhashable type: 'dict'")),
        ValueKind::Seq if !key.is_tuple() => Err(type_error("unhashable type: 'list'")),
        _ => Ok(key),
    }
}

/// `dict(*args, **kwargs)`: a mapping's items or an iterable of pairs, then the keywords; a
/// repeated key keeps its first position and its last value.
fn build_dict(args: &[Value]) -> Result<Value, Error> {
    let (positional, kwargs): (&[Value], Kwargs) = from_args(args)?;
    if positional.len() > 1 {
        return Err(type_error(format!(
            "dict expected at most 1 argument, got {}",
            positional.len()
        )));
    }
    let mut pairs: Vec<(Value, Value)> = Vec::new();
    if let Some(source) = positional.first() {
        match source.kind() {
            ValueKind::Map if is_dict(source) => {
                for key in source.try_iter()? {
                    let value = source.get_item(&key)?;
                    pairs.push((key, value));
                }
            }
            ValueKind::Undefined | ValueKind::Seq | ValueKind::Iterable | ValueKind::String => {
                for (i, item) in source.try_iter()?.enumerate() {
                    let parts: Vec<Value> = item.try_iter()?.collect();
                    match <[Value; 2]>::try_from(parts) {
                        Ok([k, v]) => pairs.push((hashable(k)?, v)),
                        Err(parts) => {
                            return Err(type_error(format!(
                            "dictionary update sequence element #{i} has length {}; 2 is required",
                            parts.len()
                        )))
                        }
                    }
                }
            }
            _ => {
                return Err(type_error(format!(
                    "'{}' object is not iterable",
                    source.kind()
                )))
            }
        }
    }
    for name in kwargs.args() {
        let value: Value = kwargs.get(name)?;
        pairs.push((Value::from(name), value));
    }
    Ok(Value::from_pairs(pairs))
}

/// transformers' `TemplateDict`: the `dict` global, callable, with `fromkeys`.
#[derive(Debug)]
struct TemplateDict;

impl Object for TemplateDict {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }

    fn call(self: &Arc<Self>, _state: &mut State<'_, '_>, args: &[Value]) -> Result<Value, Error> {
        build_dict(args)
    }

    fn call_method(
        self: &Arc<Self>,
        _state: &mut State<'_, '_>,
        method: &str,
        args: &[Value],
    ) -> Result<Value, Error> {
        if method != "fromkeys" {
            return Err(Error::from(ErrorKind::UnknownMethod));
        }
        // `dict.fromkeys(iterable, value=None, /)`.
        let (keys, value): (&Value, Option<&Value>) = from_args(args)?;
        let value = value.cloned().unwrap_or(Value::from(()));
        let mut pairs = Vec::new();
        for key in keys.try_iter()? {
            pairs.push((hashable(key)?, value.clone()));
        }
        Ok(Value::from_pairs(pairs))
    }
}

/// The `dict` global.
pub fn template_dict() -> Value {
    Value::from_object(TemplateDict)
}

/// transformers' `namespace(*args, **kwargs)`: the attributes `dict()` would build; a name
/// starting with `_` is refused (transformers raises SecurityError). Templates create namespaces
/// in loops, so the usual forms (keywords only, or one mapping) go to minijinja's `namespace` as
/// they are, without building a dict first.
pub fn namespace(
    first: Option<ValueOrKwargs>,
    second: Option<ValueOrKwargs>,
) -> Result<Value, Error> {
    match (first, second) {
        (None, _) => minijinja::functions::namespace(None),
        (Some(one), None) if one.kind() == ValueKind::Map => {
            refuse_private_names(&one)?;
            minijinja::functions::namespace(Some(one))
        }
        (Some(a), b) => {
            let mut args = vec![a.into_value()];
            args.extend(b.map(ValueOrKwargs::into_value));
            let attrs = build_dict(&args)?;
            refuse_private_names(&attrs)?;
            let defaults = <ValueOrKwargs as ArgType>::from_value(Some(&attrs))?;
            minijinja::functions::namespace(Some(defaults))
        }
    }
}

fn refuse_private_names(attrs: &Value) -> Result<(), Error> {
    match private_name(attrs)? {
        Some(name) => Err(type_error(format!(
            "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '{name}'"
        ))),
        None => Ok(()),
    }
}

/// The first key of `attrs` that starts with `_`. Keywords and dicts are read in place: a key
/// iterator would allocate on every `namespace()` call.
fn private_name(attrs: &Value) -> Result<Option<String>, Error> {
    let private = |k: &str| k.starts_with('_');
    if attrs.is_kwargs() {
        let kwargs = <Kwargs as ArgType>::from_value(Some(attrs))?;
        return Ok(kwargs.args().find(|k| private(k)).map(str::to_string));
    }
    if let Some(PyDict(inner)) = attrs.downcast_object_ref::<PyDict>() {
        return private_name(inner);
    }
    if let Some(map) = attrs.downcast_object_ref::<indexmap::IndexMap<Value, Value>>() {
        let found = map.keys().find_map(|k| k.as_str().filter(|k| private(k)));
        return Ok(found.map(str::to_string));
    }
    for key in attrs.try_iter()? {
        if let Some(name) = key.as_str().filter(|k| private(k)) {
            return Ok(Some(name.to_string()));
        }
    }
    Ok(None)
}

/// `d.keys()`, `d.values()` and `d.items()`: Python's views, which loop, count and test
/// membership as lists do and print as `dict_items([('a', 1)])` (minijinja-contrib's print as the
/// bare list).
#[derive(Debug)]
struct DictView {
    dict: Value,
    kind: &'static str,
}

impl DictView {
    fn items(&self) -> Box<dyn Iterator<Item = Value> + Send + Sync> {
        let Some(pairs) = self.dict.as_object().and_then(|o| o.try_iter_pairs()) else {
            return Box::new(std::iter::empty());
        };
        match self.kind {
            "keys" => Box::new(pairs.map(|(k, _)| k)),
            "values" => Box::new(pairs.map(|(_, v)| v)),
            _ => Box::new(pairs.map(|(k, v)| Value::from(minijinja::value::Tuple::from([k, v])))),
        }
    }
}

impl Object for DictView {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Iterable
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Iter(self.items())
    }

    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        self.dict.len()
    }

    fn render(self: &Arc<Self>, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result
    where
        Self: Sized + 'static,
    {
        let list = Value::from(self.items().collect::<Vec<_>>());
        write!(f, "dict_{}({})", self.kind, super::pyjson::py_str(&list))
    }
}

/// `d.copy()` and the views of a dict (see [`is_dict`]); `None` for other methods.
pub(crate) fn dict_method_call(
    dict: &Value,
    method: &str,
    args: &[Value],
) -> Option<Result<Value, Error>> {
    let kind = match method {
        "keys" => "keys",
        "values" => "values",
        "items" => "items",
        "copy" => "copy",
        _ => return None,
    };
    Some((|| {
        super::pystrmethods::method_args(method, args, &[], 0, false)?;
        if kind != "copy" {
            return Ok(Value::from_object(DictView {
                dict: dict.clone(),
                kind,
            }));
        }
        let mut pairs = Vec::new();
        for key in dict.try_iter()? {
            let value = dict.get_item(&key)?;
            pairs.push((key, value));
        }
        let copy = Value::from_pairs(pairs);
        // A request dict's copy keeps its attribute rule (`x.items` is the method).
        Ok(if dict.downcast_object_ref::<PyDict>().is_some() {
            Value::from_object(PyDict(copy))
        } else {
            copy
        })
    })())
}
