//! torch's `ConfigTokenizer`: the string as the passes see it, one token per word or
//! separator, each remembering where it sits in the input (for error messages).

use super::keys::c_isspace;

/// One token of torch's `ConfigTokenizer`, with where it sits in the input.
pub(super) struct Tok {
    pub(super) text: String,
    pub(super) start: usize,
    pub(super) end: usize,
    /// Whitespace inside the token was dropped (`1 00` became `100`).
    pub(super) squeezed: bool,
}

/// `c10::CachingAllocator::ConfigTokenizer`: `,` `:` `[` `]` are tokens of their own, C-locale
/// whitespace is dropped, everything else accumulates into words.
pub(super) struct Tokens<'s> {
    pub(super) src: &'s str,
    pub(super) toks: Vec<Tok>,
}

impl<'s> Tokens<'s> {
    pub(super) fn new(src: &'s str) -> Self {
        let (mut toks, mut word, mut gap) = (Vec::new(), None::<Tok>, false);
        for (pos, ch) in src.char_indices() {
            if matches!(ch, ',' | ':' | '[' | ']') {
                toks.extend(word.take());
                let text = ch.to_string();
                toks.push(Tok {
                    text,
                    start: pos,
                    end: pos + 1,
                    squeezed: false,
                });
            } else if c_isspace(ch) {
                gap = word.is_some();
                continue;
            } else {
                let new = || Tok {
                    text: String::new(),
                    start: pos,
                    end: pos,
                    squeezed: false,
                };
                let w = word.get_or_insert_with(new);
                w.squeezed |= gap;
                w.text.push(ch);
                w.end = pos + ch.len_utf8();
            }
            gap = false;
        }
        toks.extend(word);
        Tokens { src, toks }
    }

    pub(super) fn len(&self) -> usize {
        self.toks.len()
    }

    /// The text of token `i`, or "" past the end (callers check bounds first).
    pub(super) fn text(&self, i: usize) -> &str {
        self.toks.get(i).map_or("", |t| t.text.as_str())
    }
}
