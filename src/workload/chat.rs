//! The `chat_random` workload: random token-id prompts framed by the model's
//! chat template as one user message, as InferenceX's client sends them with
//! `--use-chat-template` (utils/bench_serving/benchmark_serving.py: random
//! ids, the template around them, the input length reduced by the template's
//! own tokens so the total stays as asked).
//!
//! Here the frame is token ids (the template rendered around a marker and
//! split there, see the shim's `chat_frame`), so a framed prompt has exactly
//! the drawn length: frame prefix + the first `len - frame` drawn ids + frame
//! suffix. InferenceX's client instead decodes its random ids to text and
//! re-tokenizes the templated text, so its lengths drift by a few tokens.
//! Its `--dsv4` switch (DeepSeek-V4's own message encoder) is not
//! reproduced: the tokenizer's chat template is used for every model.

use anyhow::Result;

use crate::error::usage;

/// Frames each prompt in place: `prefix + prompt[..len - frame] + suffix`,
/// the same length as before.
///
/// Errors (usage): a prompt shorter than the frame plus one token.
pub fn frame_prompts(prompts: &mut [Vec<u32>], prefix: &[u32], suffix: &[u32]) -> Result<()> {
    let frame = prefix.len() + suffix.len();
    for p in prompts.iter_mut() {
        let len = p.len();
        if len <= frame {
            return Err(usage(format!(
                "chat_random: a {len}-token prompt cannot hold the chat template's {frame} tokens and any content: raise the ISL above {frame}"
            )));
        }
        let body_len = len - frame;
        p.truncate(body_len);
        p.splice(0..0, prefix.iter().copied());
        p.extend_from_slice(suffix);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framed_prompts_keep_their_length_and_body() {
        let mut prompts = vec![(10..20).collect::<Vec<u32>>(), (30..36).collect()];
        frame_prompts(&mut prompts, &[1, 2, 3], &[4, 5]).unwrap();
        assert_eq!(prompts[0], vec![1, 2, 3, 10, 11, 12, 13, 14, 4, 5]);
        assert_eq!(prompts[1], vec![1, 2, 3, 30, 4, 5]);
        let e = frame_prompts(&mut [vec![7; 5]], &[1, 2, 3], &[4, 5]).unwrap_err();
        assert!(e.to_string().contains("cannot hold the chat template's 5 tokens"), "{e}");
    }
}
