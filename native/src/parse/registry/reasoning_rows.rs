//! Reasoning parser rows (see the module docs of [`super`]). `start` is read off vLLM's own parsers
//! by the oracle: the default is whether plain output counts as reasoning, and `flags` are the
//! `chat_template_kwargs` booleans whose true and false values gave different results.

use super::{Build, Detect, Parser, Sig, StartRule};
use crate::parse::reasoning::{harmony, ThinkSpec};

const BASE: Parser = Parser::REASONING;

/// Every reasoning format vLLM 0.33 or SGLang 0.5.23 registers.
pub(super) const ROWS: &[Parser] = &[
    Parser {
        name: "deepseek_r1",
        vllm: &["deepseek_r1", "step5"],
        sglang: &["deepseek-r1", "gigachat35"],
        markers: &["<think>", "</think>"],
        build: Build::Think(ThinkSpec {
            start: &["<think>"],
            end: &["</think>"],
            implicit_end: &[],
            trim_end: false,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: true,
            flags: &[],
            needs_thinking: false,
        },
        detect: &[Detect {
            rank: 32,
            all: &[
                &[Sig::Template("<｜tool▁calls▁begin｜>")],
                &[Sig::Template("<think>"), Sig::Template("</think>")],
            ],
            unless: &[],
        }],
        about: "",
        ..BASE
    },
    Parser {
        name: "qwen3",
        vllm: &["qwen3"],
        sglang: &["dots", "qwen3", "qwen3-thinking", "nanbeige", "interns1"],
        markers: &["<think>", "</think>", "<tool_call>"],
        build: Build::Think(ThinkSpec {
            start: &["<think>"],
            end: &["</think>"],
            implicit_end: &["<tool_call>"],
            trim_end: false,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: true,
            flags: &["enable_thinking"],
            needs_thinking: true,
        },
        detect: &[Detect {
            rank: 80,
            all: &[
                &[Sig::Template("<tool_call>")],
                &[Sig::Template("<think>"), Sig::Template("</think>")],
            ],
            unless: &[],
        }],
        about: "",
        ..BASE
    },
    Parser {
        name: "glm45",
        vllm: &["glm45", "glm47"],
        sglang: &["glm45"],
        markers: &["<think>", "</think>", "<tool_call>"],
        build: Build::Think(ThinkSpec {
            start: &["<think>"],
            end: &["</think>"],
            implicit_end: &["<tool_call>"],
            trim_end: true,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: true,
            flags: &["enable_thinking", "thinking"],
            needs_thinking: true,
        },
        detect: &[Detect {
            rank: 60,
            all: &[&[Sig::Template("<arg_key>")]],
            unless: &[],
        }],
        about: "",
        ..BASE
    },
    Parser {
        name: "ling3",
        vllm: &["ling3"],
        sglang: &["ling3"],
        markers: &["<think>", "</think>", "<tool_call>"],
        build: Build::Think(ThinkSpec {
            start: &["<think>"],
            end: &["</think>"],
            implicit_end: &["<tool_call>"],
            trim_end: true,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: true,
            flags: &["enable_thinking", "thinking"],
            needs_thinking: true,
        },
        detect: &[Detect {
            rank: 55,
            all: &[
                &[Sig::Template("<arg_key>")],
                &[Sig::Template("<|role_end|>")],
            ],
            unless: &[],
        }],
        about: "",
        ..BASE
    },
    Parser {
        name: "kimi_k2",
        vllm: &["kimi_k2"],
        sglang: &["kimi_k2"],
        markers: &[
            "<think>",
            "</think>",
            "<|tool_calls_section_begin|>",
            "<|tool_call_section_begin|>",
        ],
        build: Build::Think(ThinkSpec {
            start: &["<think>"],
            end: &["</think>"],
            implicit_end: &[
                "<|tool_calls_section_begin|>",
                "<|tool_call_section_begin|>",
            ],
            trim_end: true,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: true,
            flags: &["enable_thinking", "thinking"],
            needs_thinking: true,
        },
        detect: &[Detect {
            rank: 50,
            all: &[
                &[Sig::Template("<|tool_calls_section_begin|>")],
                &[Sig::Template("<think>"), Sig::Template("</think>")],
            ],
            unless: &[],
        }],
        about: "",
        ..BASE
    },
    Parser {
        name: "minimax_m2",
        vllm: &["minimax_m2"],
        sglang: &["minimax"],
        markers: &["<think>", "</think>", "<minimax:tool_call>"],
        build: Build::Think(ThinkSpec {
            start: &["<think>"],
            end: &["</think>"],
            implicit_end: &["<minimax:tool_call>"],
            trim_end: true,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: true,
            flags: &[],
            needs_thinking: false,
        },
        detect: &[Detect {
            rank: 20,
            all: &[&[Sig::Template("<minimax:tool_call>")]],
            unless: &[],
        }],
        about: "",
        ..BASE
    },
    Parser {
        name: "minimax_m2_append_think",
        vllm: &["minimax_m2_append_think"],
        sglang: &["minimax-append-think"],
        markers: &[],
        build: Build::Think(ThinkSpec {
            start: &[],
            end: &[],
            implicit_end: &[],
            trim_end: false,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: false,
            flags: &[],
            needs_thinking: false,
        },
        detect: &[],
        about: "no split: the output is content as written (vLLM also prepends <think>)",
        ..BASE
    },
    Parser {
        name: "deepseek_v3",
        vllm: &["deepseek_v3"],
        sglang: &["deepseek-v3"],
        markers: &["<think>", "</think>"],
        build: Build::Think(ThinkSpec {
            start: &["<think>"],
            end: &["</think>"],
            implicit_end: &[],
            trim_end: false,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: false,
            flags: &["enable_thinking", "thinking"],
            needs_thinking: true,
        },
        detect: &[
            Detect {
                rank: 30,
                all: &[&[Sig::Template("｜DSML｜")]],
                unless: &[],
            },
            Detect {
                rank: 31,
                all: &[
                    &[Sig::Template("<｜tool▁calls▁begin｜>")],
                    &[Sig::Template("thinking")],
                ],
                unless: &[],
            },
        ],
        about: "",
        ..BASE
    },
    Parser {
        name: "holo2",
        vllm: &["holo2"],
        sglang: &[],
        markers: &["<think>", "</think>"],
        build: Build::Think(ThinkSpec {
            start: &["<think>"],
            end: &["</think>"],
            implicit_end: &[],
            trim_end: false,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: true,
            flags: &["enable_thinking", "thinking"],
            needs_thinking: true,
        },
        detect: &[],
        about: "",
        ..BASE
    },
    Parser {
        name: "step3",
        vllm: &["step3"],
        sglang: &["step3"],
        markers: &["</think>"],
        build: Build::Think(ThinkSpec {
            start: &[],
            end: &["</think>"],
            implicit_end: &[],
            trim_end: false,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: true,
            flags: &[],
            needs_thinking: false,
        },
        detect: &[],
        about: "",
        ..BASE
    },
    Parser {
        name: "step3p5",
        vllm: &["step3p5"],
        sglang: &["step3p5"],
        markers: &["<think>", "</think>", "<tool_call>"],
        build: Build::Think(ThinkSpec {
            start: &["<think>"],
            end: &["</think>"],
            implicit_end: &["<tool_call>"],
            trim_end: true,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: true,
            flags: &[],
            needs_thinking: false,
        },
        detect: &[Detect {
            rank: 70,
            all: &[&[Sig::Template("<im_patch>")], &[Sig::Template("<think>")]],
            unless: &[],
        }],
        about: "",
        ..BASE
    },
    Parser {
        name: "olmo3",
        vllm: &["olmo3"],
        sglang: &[],
        markers: &["<think>", "</think>"],
        build: Build::Think(ThinkSpec {
            start: &["<think>"],
            end: &["</think>"],
            implicit_end: &[],
            trim_end: false,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: true,
            flags: &["enable_thinking", "thinking"],
            needs_thinking: false,
        },
        detect: &[],
        about: "",
        ..BASE
    },
    Parser {
        name: "nemotron_v3",
        vllm: &["nemotron_v3"],
        sglang: &["nemotron_3"],
        markers: &["<think>", "</think>", "<tool_call>"],
        build: Build::Think(ThinkSpec {
            start: &["<think>"],
            end: &["</think>"],
            implicit_end: &["<tool_call>"],
            trim_end: true,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: true,
            flags: &["enable_thinking"],
            needs_thinking: true,
        },
        detect: &[Detect {
            rank: 70,
            all: &[
                &[Sig::Template("<tool_call>")],
                &[Sig::Template("<think></think>")],
                &[Sig::Template("enable_thinking")],
            ],
            unless: &[],
        }],
        about: "",
        ..BASE
    },
    Parser {
        name: "granite_thinking_parser",
        vllm: &["granite_thinking_parser"],
        sglang: &["granite_thinking_parser"],
        markers: &["<think>", "</think>", "<tool_call>"],
        build: Build::Think(ThinkSpec {
            start: &["<think>"],
            end: &["</think>"],
            implicit_end: &["<tool_call>"],
            trim_end: true,
            trim_after_end: true,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: true,
            flags: &["enable_thinking"],
            needs_thinking: true,
        },
        detect: &[],
        about: "",
        ..BASE
    },
    Parser {
        name: "mimo",
        vllm: &["mimo"],
        sglang: &["mimo"],
        markers: &["<think>", "</think>", "<tool_call>"],
        build: Build::Think(ThinkSpec {
            start: &["<think>"],
            end: &["</think>"],
            implicit_end: &["<tool_call>"],
            trim_end: false,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: true,
            flags: &["enable_thinking"],
            needs_thinking: true,
        },
        detect: &[],
        about: "",
        ..BASE
    },
    Parser {
        name: "minicpmv",
        vllm: &["minicpmv"],
        sglang: &[],
        markers: &["<think>", "</think>", "<tool_call>"],
        build: Build::Think(ThinkSpec {
            start: &["<think>"],
            end: &["</think>"],
            implicit_end: &["<tool_call>"],
            trim_end: false,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: true,
            flags: &["enable_thinking"],
            needs_thinking: true,
        },
        detect: &[],
        about: "",
        ..BASE
    },
    Parser {
        name: "ernie45",
        vllm: &["ernie45"],
        sglang: &[],
        markers: &["<think>", "</think>", "<response>", "</response>"],
        build: Build::Think(ThinkSpec {
            start: &["<think>"],
            end: &["</think>"],
            implicit_end: &[],
            trim_end: false,
            answer_open: &["<response>"],
            answer_close: &["</response>"],
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: true,
            flags: &[],
            needs_thinking: false,
        },
        detect: &[],
        about: "",
        ..BASE
    },
    Parser {
        name: "hunyuan_a13b",
        vllm: &["hunyuan_a13b"],
        sglang: &[],
        markers: &["<think>\n", "\n</think>\n<answer>\n", "\n</answer>"],
        build: Build::Think(ThinkSpec {
            start: &["<think>\n"],
            end: &["\n</think>\n<answer>\n"],
            implicit_end: &[],
            trim_end: false,
            answer_close: &["\n</answer>"],
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: false,
            flags: &[],
            needs_thinking: false,
        },
        detect: &[],
        about: "",
        ..BASE
    },
    Parser {
        name: "hy_v3",
        vllm: &["hy_v3"],
        sglang: &["hunyuan"],
        markers: &["<think{sfx}>", "</think{sfx}>"],
        build: Build::Think(ThinkSpec {
            start: &["<think{sfx}>"],
            end: &["</think{sfx}>"],
            implicit_end: &[],
            trim_end: false,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: false,
            flags: &["reasoning_effort!=no_think"],
            needs_thinking: true,
        },
        detect: &[Detect {
            rank: 15,
            all: &[&[Sig::Template("<think{}>")], &[Sig::Template("<tool_sep{}>")]],
            unless: &[],
        }],
        about: "<think>/</think> spelled with the checkpoint's token suffix (Hy3: <think:opensource>)",
        ..BASE
    },
    Parser {
        name: "hy_v4",
        vllm: &["hy_v4"],
        sglang: &[],
        markers: &["<think{sfx}>", "</think{sfx}>"],
        build: Build::Think(ThinkSpec {
            start: &["<think{sfx}>"],
            end: &["</think{sfx}>"],
            implicit_end: &[],
            trim_end: false,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: true,
            flags: &["reasoning_effort!=no_think"],
            needs_thinking: true,
        },
        detect: &[],
        about: "<think>/</think> spelled with the checkpoint's token suffix (<think:6124c78e>)",
        ..BASE
    },
    Parser {
        name: "deepseek_v4",
        vllm: &["deepseek_v4"],
        sglang: &["deepseek-v4"],
        markers: &[
            "<think>",
            "</think>",
            "<｜DSML｜tool_calls>",
            "<｜DSML｜toolcalls>",
            "<｜DSML｜tool>",
        ],
        build: Build::Think(ThinkSpec {
            start: &["<think>"],
            end: &["</think>"],
            implicit_end: &[
                "<｜DSML｜tool_calls>",
                "<｜DSML｜toolcalls>",
                "<｜DSML｜tool>",
            ],
            trim_end: true,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: true,
            flags: &["enable_thinking", "thinking"],
            needs_thinking: true,
        },
        detect: &[Detect {
            rank: 29,
            all: &[
                &[Sig::Template("｜DSML｜")],
                &[Sig::Template("tool_calls>")],
            ],
            unless: &[],
        }],
        about: "",
        ..BASE
    },
    Parser {
        name: "deepseek_v41",
        vllm: &["deepseek_v41"],
        sglang: &["deepseek-v41"],
        markers: &["<think>", "</think>", "<｜DSML｜ calls>"],
        build: Build::Think(ThinkSpec {
            start: &["<think>"],
            end: &["</think>"],
            implicit_end: &["<｜DSML｜ calls>"],
            trim_end: true,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: true,
            flags: &["enable_thinking", "thinking"],
            needs_thinking: true,
        },
        detect: &[],
        about: "",
        ..BASE
    },
    Parser {
        name: "mistral",
        vllm: &["mistral"],
        sglang: &["mistral"],
        markers: &["[THINK]", "[/THINK]"],
        build: Build::Think(ThinkSpec {
            start: &["[THINK]"],
            end: &["[/THINK]"],
            implicit_end: &[],
            trim_end: true,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: false,
            flags: &[],
            needs_thinking: false,
        },
        detect: &[Detect {
            rank: 90,
            all: &[
                &[Sig::Template("[TOOL_CALLS]"), Sig::Token("[TOOL_CALLS]")],
                &[Sig::Template("[THINK]"), Sig::Token("[THINK]")],
            ],
            unless: &[],
        }],
        about: "",
        ..BASE
    },
    Parser {
        name: "openai_gptoss",
        vllm: &["openai_gptoss"],
        sglang: &["gpt-oss"],
        legacy: &["openai"],
        markers: harmony::MARKERS,
        build: Build::Whole {
            family: "harmony",
            build: harmony::build,
        },
        start: StartRule::CONTENT,
        detect: &[Detect {
            rank: 10,
            all: &[&[Sig::Token("<|channel|>")], &[Sig::Token("<|message|>")]],
            unless: &[],
        }],
        about: "",
        ..BASE
    },
    Parser {
        name: "seed_oss",
        vllm: &["seed_oss"],
        sglang: &[],
        markers: &["<seed:think>", "</seed:think>", "<seed:tool_call>"],
        build: Build::Think(ThinkSpec {
            start: &["<seed:think>"],
            end: &["</seed:think>"],
            implicit_end: &["<seed:tool_call>"],
            trim_end: false,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: true,
            flags: &["enable_thinking"],
            needs_thinking: true,
        },
        detect: &[Detect {
            rank: 15,
            all: &[&[Sig::Template("<seed:think>")]],
            unless: &[],
        }],
        about: "",
        ..BASE
    },
    Parser {
        name: "minimax_m3",
        vllm: &["minimax_m3"],
        sglang: &["minimax-m3"],
        markers: &["<mm:think>", "</mm:think>"],
        build: Build::Think(ThinkSpec {
            start: &["<mm:think>"],
            end: &["</mm:think>"],
            implicit_end: &[],
            trim_end: false,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: false,
            flags: &["thinking_mode=enabled"],
            needs_thinking: false,
        },
        detect: &[Detect {
            rank: 18,
            all: &[&[Sig::Template("<mm:think>")]],
            unless: &[],
        }],
        about: "",
        ..BASE
    },
    Parser {
        name: "granite",
        vllm: &["granite"],
        sglang: &[],
        markers: &[
            "Here is my thought process:",
            "Here's my thought process:",
            "Here is my response:",
            "Here's my response:",
        ],
        build: Build::Think(ThinkSpec {
            start: &["Here is my thought process:", "Here's my thought process:"],
            end: &["Here is my response:", "Here's my response:"],
            implicit_end: &[],
            trim_end: false,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: false,
            flags: &[],
            needs_thinking: false,
        },
        detect: &[],
        about: "",
        ..BASE
    },
    Parser {
        name: "gemma4",
        vllm: &["gemma4"],
        sglang: &["gemma4"],
        markers: &["<|channel>", "<channel|>", "<|tool_call>"],
        build: Build::Think(ThinkSpec {
            start: &["<|channel>"],
            end: &["<channel|>"],
            implicit_end: &["<|tool_call>"],
            trim_end: true,
            label: "thought\n",
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: false,
            flags: &["enable_thinking", "thinking"],
            needs_thinking: false,
        },
        detect: &[Detect {
            rank: 15,
            all: &[&[Sig::Template("<|channel>")]],
            unless: &[],
        }],
        about: "",
        ..BASE
    },
    Parser {
        name: "cohere_command3",
        vllm: &["cohere_command3"],
        sglang: &[],
        markers: &["<|START_THINKING|>", "<|END_THINKING|>", "<|START_ACTION|>"],
        build: Build::Think(ThinkSpec {
            start: &["<|START_THINKING|>"],
            end: &["<|END_THINKING|>"],
            implicit_end: &["<|START_ACTION|>"],
            trim_end: true,
            trim_start: true,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: false,
            flags: &[],
            needs_thinking: false,
        },
        detect: &[],
        about: "",
        ..BASE
    },
    Parser {
        name: "cohere_command4",
        vllm: &["cohere_command4"],
        sglang: &["cohere_command4"],
        markers: &["<|START_THINKING|>", "<|END_THINKING|>", "<|START_ACTION|>", "<|START_RESPONSE|>", "<|START_TEXT|>"],
        build: Build::Think(ThinkSpec {
            start: &["<|START_THINKING|>"],
            end: &["<|END_THINKING|>"],
            implicit_end: &["<|START_ACTION|>", "<|START_RESPONSE|>", "<|START_TEXT|>"],
            trim_end: true,
            trim_start: true,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: true,
            flags: &[],
            needs_thinking: false,
        },
        detect: &[Detect {
            rank: 15,
            all: &[
                &[Sig::Template("<|START_THINKING|>")],
                &[Sig::Template("reasoning_effort")],
            ],
            unless: &[],
        }],
        about: "",
        ..BASE
    },
    Parser {
        name: "k2_horizon",
        vllm: &["k2_horizon"],
        sglang: &["k2_horizon"],
        markers: &["<ifm|think>", "</ifm|think>", "<ifm|tool_calls>"],
        build: Build::Think(ThinkSpec {
            start: &["<ifm|think>"],
            end: &["</ifm|think>"],
            implicit_end: &["<ifm|tool_calls>"],
            trim_end: false,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: true,
            flags: &["enable_thinking", "thinking"],
            needs_thinking: false,
        },
        detect: &[Detect {
            rank: 15,
            all: &[&[Sig::Template("<ifm|think>")]],
            unless: &[],
        }],
        about: "the reasoning_effort=high markers only; <ifm|think_fast>/<ifm|think_faster> blocks are text",
        ..BASE
    },
    Parser {
        name: "kimi_k3",
        vllm: &["kimi_k3"],
        sglang: &["kimi_k3"],
        markers: &[
            "<|open|>think<|sep|>",
            "<|close|>think<|sep|>",
            "<|open|>",
            "<|close|>",
            "<|sep|>",
        ],
        build: Build::Think(ThinkSpec {
            start: &["<|open|>think<|sep|>"],
            end: &["<|close|>think<|sep|>"],
            implicit_end: &[],
            trim_end: false,
            pieces: &["<|open|>", "<|close|>", "<|sep|>"],
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: true,
            flags: &["enable_thinking", "thinking"],
            needs_thinking: true,
        },
        detect: &[Detect {
            rank: 16,
            all: &[&[Sig::Template("<|open|>")], &[Sig::Template("<|close|>")]],
            unless: &[],
        }],
        about: "",
        ..BASE
    },
    Parser {
        name: "inkling",
        vllm: &["inkling"],
        sglang: &["inkling"],
        markers: &[
            "<|message_model|><|content_thinking|>",
            "<|content_thinking|>",
            "<|end_message|>",
            "<|message_model|><|content_text|>",
            "<|end_message|>",
            "<|message_model|>",
        ],
        build: Build::Think(ThinkSpec {
            start: &[
                "<|message_model|><|content_thinking|>",
                "<|content_thinking|>",
            ],
            end: &["<|end_message|>"],
            implicit_end: &[],
            trim_end: true,
            answer_open: &["<|message_model|><|content_text|>"],
            answer_close: &["<|end_message|>"],
            pieces: &["<|message_model|>"],
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: false,
            flags: &[],
            needs_thinking: false,
        },
        detect: &[Detect {
            rank: 15,
            all: &[&[Sig::Template("<|content_thinking|>")]],
            unless: &[],
        }],
        about: "",
        ..BASE
    },
    Parser {
        name: "plamo3",
        vllm: &["plamo3"],
        sglang: &[],
        markers: &["<|plamo:begin_think:plamo|>", "<|plamo:end_think:plamo|>"],
        build: Build::Think(ThinkSpec {
            start: &["<|plamo:begin_think:plamo|>"],
            end: &["<|plamo:end_think:plamo|>"],
            implicit_end: &[],
            trim_end: false,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: true,
            flags: &["enable_thinking"],
            needs_thinking: true,
        },
        detect: &[Detect {
            rank: 15,
            all: &[&[Sig::Template("<|plamo:begin_think:plamo|>")]],
            unless: &[],
        }],
        about: "",
        ..BASE
    },
    Parser {
        name: "poolside_v1",
        vllm: &["poolside_v1"],
        sglang: &["poolside_v1"],
        markers: &["<think>", "</think>"],
        build: Build::Think(ThinkSpec {
            start: &["<think>"],
            end: &["</think>"],
            implicit_end: &[],
            trim_end: false,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: false,
            flags: &["enable_thinking", "thinking"],
            needs_thinking: true,
        },
        detect: &[Detect {
            rank: 55,
            all: &[
                &[Sig::Template("<arg_key>")],
                &[Sig::Template("available_tools")],
            ],
            unless: &[],
        }],
        about: "",
        ..BASE
    },
    Parser {
        name: "muse",
        vllm: &["muse", "musespark1x"],
        sglang: &[],
        markers: &[
            "<|start|>assistant to=self<|message|>",
            "<|eom|>",
            "<|start|>",
            "<|message|>",
        ],
        build: Build::Think(ThinkSpec {
            start: &["<|start|>assistant to=self<|message|>"],
            end: &["<|eom|>"],
            implicit_end: &[],
            trim_end: false,
            pieces: &["<|start|>", "<|message|>"],
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: false,
            flags: &[],
            needs_thinking: false,
        },
        detect: &[],
        about: "",
        ..BASE
    },
    Parser {
        name: "muse_glimmer",
        vllm: &["muse_glimmer"],
        sglang: &["muse"],
        markers: &[
            "<|start|>assistant to=self<|message|>",
            "<|eom|>",
            "<|start|>",
            "<|message|>",
        ],
        build: Build::Think(ThinkSpec {
            start: &["<|start|>assistant to=self<|message|>"],
            end: &["<|eom|>"],
            implicit_end: &[],
            trim_end: false,
            pieces: &["<|start|>", "<|message|>"],
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: false,
            flags: &[],
            needs_thinking: false,
        },
        detect: &[Detect {
            rank: 15,
            all: &[
                &[Sig::Template("<atem:function_calls>")],
                &[Sig::Template("to=self")],
            ],
            unless: &[],
        }],
        about: "",
        ..BASE
    },
    Parser {
        name: "beam",
        vllm: &["beam"],
        sglang: &["beam"],
        markers: &[],
        build: Build::Template,
        start: StartRule::CONTENT,
        detect: &[],
        about: "the model's response_template (tokenizer_config.json) interpreted; parses as hf (beam differs only in vLLM's generation grammar)",
        ..BASE
    },
    Parser {
        name: "hf",
        vllm: &["hf"],
        sglang: &["response_template"],
        markers: &[],
        build: Build::Template,
        start: StartRule::CONTENT,
        detect: &[],
        about: "the model's response_template (tokenizer_config.json) interpreted; one stage with the hf/beam tool row",
        ..BASE
    },
    Parser {
        name: "kimi",
        vllm: &[],
        sglang: &["kimi"],
        markers: &["◁think▷", "◁/think▷"],
        build: Build::Think(ThinkSpec {
            start: &["◁think▷"],
            end: &["◁/think▷"],
            implicit_end: &[],
            trim_end: false,
            ..ThinkSpec::BASE
        }),
        start: StartRule::CONTENT,
        detect: &[Detect {
            rank: 15,
            all: &[&[Sig::Template("◁think▷")]],
            unless: &[],
        }],
        about: "",
        ..BASE
    },
    Parser {
        name: "apertus2509",
        vllm: &[],
        sglang: &["apertus2509"],
        markers: &["<|inner_prefix|>", "<|inner_suffix|>"],
        build: Build::Think(ThinkSpec {
            start: &["<|inner_prefix|>"],
            end: &["<|inner_suffix|>"],
            implicit_end: &[],
            trim_end: false,
            ..ThinkSpec::BASE
        }),
        start: StartRule::CONTENT,
        detect: &[Detect {
            rank: 15,
            all: &[&[Sig::Template("<|inner_prefix|>")]],
            unless: &[],
        }],
        about: "",
        ..BASE
    },
    Parser {
        name: "iquest_q1",
        vllm: &[],
        sglang: &["iquest_q1"],
        markers: &["<think>", "</think>"],
        build: Build::Think(ThinkSpec {
            start: &["<think>"],
            end: &["</think>"],
            implicit_end: &[],
            trim_end: false,
            ..ThinkSpec::BASE
        }),
        start: StartRule {
            default_reasoning: true,
            flags: &["enable_thinking", "thinking"],
            needs_thinking: false,
        },
        detect: &[],
        about: "",
        ..BASE
    },
];
