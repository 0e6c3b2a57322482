//! The free set against a model: one ordered map of (stream, size, counter, address).

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

/// The reference: torch's one ordered set.
type Model = BTreeMap<(u64, SizeKey), BlockId>;

fn forward(set: &FreeSet, stream: u64, size: u64) -> Vec<BlockId> {
    set.at_or_after(stream, size).map(|(_, &id)| id).collect()
}

fn model_forward(m: &Model, stream: u64, size: u64) -> Vec<BlockId> {
    m.range((stream, (size, 0, 0))..(stream + 1, (0, 0, 0)))
        .map(|(_, &id)| id)
        .collect()
}

fn model_backward(m: &Model, stream: u64, size: u64) -> Vec<BlockId> {
    m.range((stream, (0, 0, 0))..(stream, (size, 0, 0)))
        .rev()
        .map(|(_, &id)| id)
        .collect()
}

#[derive(Debug, Clone)]
enum Op {
    Insert {
        stream: u64,
        size: u64,
        seg: u32,
    },
    Remove {
        pick: usize,
    },
    TakeFirst {
        stream: u64,
        size: u64,
        accept: bool,
    },
    Query {
        stream: u64,
        size: u64,
    },
}

/// Sizes that crowd a few classes (long sorted classes) and spread over many.
fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        (0u64..40).prop_map(|k| (1 << 20) + k * 512),
        (1u64..2048).prop_map(|k| k * 512),
        0u64..64,
        any::<u64>(),
    ]
}

/// Mostly a few streams (classes fill up), sometimes many (the index by hash).
fn stream() -> impl Strategy<Value = u64> {
    prop_oneof![4 => 0u64..3, 1 => 0u64..40]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (stream(), size(), 0u32..4)
            .prop_map(|(stream, size, seg)| Op::Insert { stream, size, seg }),
        3 => any::<usize>().prop_map(|pick| Op::Remove { pick }),
        2 => (stream(), size(), any::<bool>())
            .prop_map(|(stream, size, accept)| Op::TakeFirst { stream, size, accept }),
        1 => (stream(), size()).prop_map(|(stream, size)| Op::Query { stream, size }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every search, walk and removal agrees with one ordered map of
    /// (stream, size, counter, address).
    #[test]
    fn same_order_as_one_ordered_set(ops in proptest::collection::vec(op(), 1..1500)) {
        let mut set = FreeSet::default();
        let mut model = Model::new();
        let mut next_id = 1u32;
        let mut next_ptr = 0u64;
        for op in ops {
            match op {
                Op::Insert { stream, size, seg } => {
                    next_ptr += 512;
                    let key = (size, seg, next_ptr ^ 0x5555_0000);
                    let id = BlockId::new(next_id).unwrap();
                    next_id += 1;
                    set.insert(stream, key, id);
                    model.insert((stream, key), id);
                }
                Op::Remove { pick } => {
                    if model.is_empty() {
                        continue;
                    }
                    let (&(stream, key), &id) = model.iter().nth(pick % model.len()).unwrap();
                    prop_assert!(set.remove(stream, key, id));
                    prop_assert!(!set.remove(stream, key, id));
                    model.remove(&(stream, key));
                }
                Op::TakeFirst { stream, size, accept } => {
                    let first = set.at_or_after(stream, size).next().map(|(s, &id)| (s, id));
                    let want = model_forward(&model, stream, size).first().copied();
                    prop_assert_eq!(first.map(|f| f.1), want);
                    let mut offered = None;
                    let got = set.take_first_at_or_after(stream, size, |id| {
                        offered = Some(id);
                        accept
                    });
                    prop_assert_eq!(offered, want);
                    match (got, first) {
                        (None, None) => {}
                        (Some(First::Taken(id)), Some((_, want))) if accept => {
                            prop_assert_eq!(id, want);
                            model.retain(|_, v| *v != id);
                        }
                        // Refused: left where the walk found it.
                        (Some(First::Kept(slot, id)), Some(walk)) if !accept => {
                            prop_assert_eq!((slot, id), walk);
                            if size % 2 == 0 {
                                prop_assert_eq!(set.remove_at(slot), id);
                                model.retain(|_, v| *v != id);
                            }
                        }
                        other => prop_assert!(false, "unexpected {:?}", other),
                    }
                }
                Op::Query { stream, size } => {
                    prop_assert_eq!(forward(&set, stream, size), model_forward(&model, stream, size));
                    let back: Vec<BlockId> = set.before(stream, size).map(|(_, &id)| id).collect();
                    prop_assert_eq!(back, model_backward(&model, stream, size));
                }
            }
        }
        let all: Vec<_> = set.entries().collect();
        let want: Vec<_> = model.iter().map(|(&(s, k), &id)| (s, k, id)).collect();
        prop_assert_eq!(all, want);
    }
}

#[test]
fn classes_increase_with_size() {
    let mut sizes: Vec<u64> = (0..5000).collect();
    sizes.extend((12..64).flat_map(|e| [(1u64 << e) - 1, 1 << e, (1 << e) + 1]));
    sizes.push(u64::MAX);
    sizes.sort_unstable();
    for w in sizes.windows(2) {
        assert!(class_of(w[0]) <= class_of(w[1]), "{} then {}", w[0], w[1]);
    }
    assert_eq!(class_of(15), 15);
    assert_eq!(class_of(16), 16);
    assert_eq!(class_of(u64::MAX), CLASSES - 1);
}
