//! A parsed Python value tree, flat in an arena: what the pickle and JSON readers produce and
//! the snapshot decoder walks.
//!
//! Nodes refer to their children by [`NodeId`], never by pointer, so a pickle that shares one
//! object in many places (memo references) costs one node, a pickle that puts a list inside
//! itself makes no reference cycle in memory, and dropping the tree never recurses. Memory
//! is bounded by the input: at most one node per opcode (pickle) or per value (JSON).

use std::borrow::Cow;

/// Index of a node in a [`Tree`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeId(pub(crate) u32);

/// One Python value.
#[derive(Clone, Debug, PartialEq)]
pub enum Node<'a> {
    /// `None` (JSON `null`).
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An integer (pickles hold at most 16-byte integers here).
    Int(i128),
    /// A float.
    Float(f64),
    /// A string (borrowed from the input when possible).
    Str(Cow<'a, str>),
    /// A list.
    List(Vec<NodeId>),
    /// A tuple.
    Tuple(Vec<NodeId>),
    /// A dict, items in insertion order (a repeated key: the last one counts).
    Dict(Vec<(NodeId, NodeId)>),
}

impl Node<'_> {
    /// The Python type name, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Node::None => "None",
            Node::Bool(_) => "bool",
            Node::Int(_) => "int",
            Node::Float(_) => "float",
            Node::Str(_) => "str",
            Node::List(_) => "list",
            Node::Tuple(_) => "tuple",
            Node::Dict(_) => "dict",
        }
    }
}

/// A value tree: the nodes and the root.
#[derive(Clone, Debug, Default)]
pub struct Tree<'a> {
    pub(crate) nodes: Vec<Node<'a>>,
}

impl<'a> Tree<'a> {
    /// Adds a node and returns its id.
    pub(crate) fn push(&mut self, n: Node<'a>) -> NodeId {
        self.nodes.push(n);
        NodeId((self.nodes.len() - 1) as u32)
    }

    /// The node `id`.
    pub fn get(&self, id: NodeId) -> &Node<'a> {
        &self.nodes[id.0 as usize]
    }

    pub(crate) fn get_mut(&mut self, id: NodeId) -> &mut Node<'a> {
        &mut self.nodes[id.0 as usize]
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the tree has no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}
