//! Reading the JSON form of a snapshot (the same structure as the pickle, e.g. what
//! `json.dump(torch.cuda.memory._snapshot())` writes) into a value tree.
//!
//! serde_json refuses nesting deeper than 128 levels, so the conversion below recurses at
//! most that deep; memory is proportional to the document.

use std::borrow::Cow;

use serde_json::Value;

use crate::tree::{Node, NodeId, Tree};

fn add(tree: &mut Tree<'static>, v: Value) -> NodeId {
    let node = match v {
        Value::Null => Node::None,
        Value::Bool(b) => Node::Bool(b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Node::Int(i.into()),
            (None, Some(u)) => Node::Int(u.into()),
            _ => Node::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Node::Str(Cow::Owned(s)),
        Value::Array(items) => {
            let ids = items.into_iter().map(|x| add(tree, x)).collect();
            Node::List(ids)
        }
        Value::Object(map) => {
            let mut items = Vec::with_capacity(map.len());
            for (k, v) in map {
                let k = tree.push(Node::Str(Cow::Owned(k)));
                items.push((k, add(tree, v)));
            }
            Node::Dict(items)
        }
    };
    tree.push(node)
}

/// Parses a JSON document into a value tree; returns the tree and its root.
pub fn read_json(data: &[u8]) -> Result<(Tree<'static>, NodeId), serde_json::Error> {
    let v: Value = serde_json::from_slice(data)?;
    let mut tree = Tree::default();
    let root = add(&mut tree, v);
    Ok((tree, root))
}
