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

use std::sync::Arc;

use minijinja::value::{Enumerator, Object, ObjectExt, ObjectRepr};
use minijinja::{Error, State, Value};

/// A mapping from the request (messages, tools, documents, kwargs).
#[derive(Debug)]
pub struct PyDict(pub Value);

/// Whether `x.name` differs from `x["name"]` on a [`PyDict`] (see `Analysis::reads_dict_methods`).
pub(crate) fn is_method_name(name: &str) -> bool {
    SAFE_METHODS.contains(&name) || MUTATING_METHODS.contains(&name)
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
            return Some(Value::from_object(BoundMethod {
                receiver: Value::from_dyn_object(self.clone()),
                name,
            }));
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

/// `x.items` without the call: calling it calls the method.
#[derive(Debug)]
pub struct BoundMethod {
    receiver: Value,
    name: &'static str,
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
        write!(f, "<built-in method {} of dict object>", self.name)
    }
}
