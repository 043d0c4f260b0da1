//! Tool-call parser rows (see the module docs of [`super`]). One row per format; a row without a
//! `build` is registered by the engines and not implemented here yet. To implement one: write its
//! module under `parse/tools/`, then set `markers` to the module's `MARKERS` and `build` to
//! `Build::Tool(module::build)` (docs/adding_a_parser.md).

use super::{Build, Detect, IdStyle, Parser, Sig};
use crate::parse::reasoning::harmony;
use crate::parse::tools::json_formats as jf;
use crate::parse::tools::{
    deepseek, gemma, glm, hermes, inkling, invoke, kimi, kimi_k3, llama3_json, minimax_m3, mistral,
    muse, plamo3, pythonic, qwen3_coder,
};

const BASE: Parser = Parser::TOOL;

/// Every tool-call format vLLM 0.33 or SGLang 0.5.23 registers.
pub(super) const ROWS: &[Parser] = &[
    Parser {
        name: "hermes",
        vllm: &["hermes", "qwen3_json"],
        sglang: &["qwen", "qwen25", "trinity", "hermes"],
        markers: hermes::MARKERS,
        build: Build::Tool(hermes::build),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 80, all: &[&[Sig::Template("<tool_call>")]], unless: &[] }],
        about: "JSON {name, arguments} per block. SGLang qwen25/qwen use '<tool_call>\\n' / '\\n</tool_call>' as markers; trinity is qwen25 that first strips <think> blocks.",
        ..BASE
    },
    Parser {
        name: "qwen3_coder",
        vllm: &["qwen3_coder", "qwen3_xml"],
        sglang: &["qwen3_coder", "nanbeige"],
        markers: qwen3_coder::MARKERS,
        build: Build::Tool(qwen3_coder::build),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 70, all: &[&[Sig::Template("<function=")], &[Sig::Template("<parameter=")]], unless: &[] }],
        about: "vLLM: engine grammar vllm/parser/qwen3.py (Qwen3ParserToolAdapter); one framing newline stripped each side of a value.",
        ..BASE
    },
    Parser {
        name: "step3p5",
        vllm: &["step3p5"],
        sglang: &["step3p5"],
        markers: qwen3_coder::MARKERS,
        build: Build::Tool(qwen3_coder::build),
        ids: IdStyle::OpenAi,
        detect: &[],
        about: "Qwen3 XML grammar; SGLang maps step3p5 to its Qwen3CoderDetector.",
        ..BASE
    },
    Parser {
        name: "step5",
        vllm: &["step5"],
        sglang: &[],
        markers: qwen3_coder::MARKERS,
        build: Build::Tool(qwen3_coder::build),
        ids: IdStyle::OpenAi,
        detect: &[],
        about: "Qwen Coder grammar with Step-5's content whitespace preserved.",
        ..BASE
    },
    Parser {
        name: "mimo",
        vllm: &["mimo"],
        sglang: &["mimo"],
        markers: qwen3_coder::MARKERS,
        build: Build::Tool(qwen3_coder::build_mimo),
        ids: IdStyle::OpenAi,
        detect: &[],
        about: "Qwen3 XML with verbatim (compact) string values.",
        ..BASE
    },
    Parser {
        name: "seed_oss",
        vllm: &["seed_oss"],
        sglang: &[],
        markers: qwen3_coder::SEED_MARKERS,
        build: Build::Tool(qwen3_coder::build_seed_oss),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 15, all: &[&[Sig::Template("<seed:tool_call>")]], unless: &[] }],
        about: "Qwen3 XML grammar with seed: wrapper tokens.",
        ..BASE
    },
    Parser {
        name: "llama3_json",
        vllm: &["llama3_json", "llama4_json"],
        sglang: &["llama3"],
        markers: llama3_json::MARKERS,
        build: Build::Tool(llama3_json::build),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 100, all: &[&[Sig::Token("<|python_tag|>"), Sig::Template("ipython")]], unless: &[] }],
        about: "bare JSON {name, parameters|arguments} objects separated by '; '; optional <|python_tag|>.",
        ..BASE
    },
    Parser {
        name: "mistral",
        vllm: &["mistral"],
        sglang: &["mistral"],
        markers: mistral::MARKERS,
        build: Build::Tool(mistral::build),
        ids: IdStyle::Mistral,
        detect: &[Detect { rank: 90, all: &[&[Sig::Template("[TOOL_CALLS]"), Sig::Token("[TOOL_CALLS]")]], unless: &[] }],
        about: "dialect from the tokenizer: [ARGS] in vocab = v11+ 'name[ARGS]{json}' (inputs/mistral_v11.json), else pre-v11 '[TOOL_CALLS] [{...}]' (inputs/mistral.json). SGLang's bot token is '[TOOL_CALLS] ['.",
        ..BASE
    },
    Parser {
        name: "deepseek_v3",
        vllm: &["deepseek_v3"],
        sglang: &["deepseekv3"],
        markers: deepseek::MARKERS,
        build: Build::Tool(deepseek::build_v3),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 40, all: &[&[Sig::Template("<｜tool▁calls▁begin｜>")], &[Sig::Template("```json")]], unless: &[] }],
        about: "<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>",
        ..BASE
    },
    Parser {
        name: "deepseek_v31",
        vllm: &["deepseek_v31"],
        sglang: &["deepseekv31"],
        markers: deepseek::MARKERS,
        build: Build::Tool(deepseek::build_v31),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 41, all: &[&[Sig::Template("<｜tool▁calls▁begin｜>")]], unless: &[] }],
        about: "<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>",
        ..BASE
    },
    Parser {
        name: "deepseek_v32",
        vllm: &["deepseek_v32"],
        sglang: &["deepseekv32"],
        markers: invoke::DSML_MARKERS,
        build: Build::Tool(invoke::build_dsml),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 30, all: &[&[Sig::Template("｜DSML｜")]], unless: &[] }],
        about: "string=\"false\" values are JSON; markers are text, not special tokens.",
        ..BASE
    },
    Parser {
        name: "deepseek_v4",
        vllm: &["deepseek_v4"],
        sglang: &["deepseekv4"],
        markers: invoke::DSML_V4_MARKERS,
        build: Build::Tool(invoke::build_dsml_v4),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 29, all: &[&[Sig::Template("｜DSML｜")], &[Sig::Template("tool_calls>")]], unless: &[] }],
        about: "DSML with tool_calls wrapper; vLLM's grammar also holds <think>.",
        ..BASE
    },
    Parser {
        name: "deepseek_v41",
        vllm: &["deepseek_v41"],
        sglang: &["deepseekv41"],
        markers: invoke::DSML_V41_MARKERS,
        build: Build::Tool(invoke::build_dsml_v41),
        ids: IdStyle::OpenAi,
        detect: &[],
        about: "DSML with a space after ｜DSML｜ in every tag name.",
        ..BASE
    },
    Parser {
        name: "kimi_k2",
        vllm: &["kimi_k2"],
        sglang: &["kimi_k2"],
        markers: kimi::MARKERS,
        build: Build::Tool(kimi::build),
        ids: IdStyle::Format,
        detect: &[Detect { rank: 50, all: &[&[Sig::Template("<|tool_calls_section_begin|>")]], unless: &[] }],
        about: "the header before <|tool_call_argument_begin|> is the native id",
        ..BASE
    },
    Parser {
        name: "kimi_k3",
        vllm: &["kimi_k3"],
        sglang: &["kimi_k3"],
        markers: kimi_k3::MARKERS,
        build: Build::Tool(kimi_k3::build),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 16, all: &[&[Sig::Template("<|open|>")], &[Sig::Template("<|close|>")]], unless: &[] }],
        about: "XTML channels response/tools",
        ..BASE
    },
    Parser {
        name: "k2_horizon",
        vllm: &["k2_horizon"],
        sglang: &["k2_horizon"],
        markers: glm::K2_HORIZON.markers,
        build: Build::Tool(glm::build_k2_horizon),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 15, all: &[&[Sig::Template("<ifm|tool_calls>")]], unless: &[] }],
        about: "body is XML key/value, typed XML, or JSON",
        ..BASE
    },
    Parser {
        name: "glm47",
        vllm: &["glm47", "glm45"],
        sglang: &["glm", "glm45", "glm47", "spark25"],
        markers: glm::MARKERS,
        build: Build::Tool(glm::build),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 60, all: &[&[Sig::Template("<arg_key>")]], unless: &[] }],
        about: "vLLM maps glm45 and glm47 to the GLM-4.7 class (newline after the name optional). SGLang glm45/glm = Glm4MoeDetector (4.5 framing), glm47 = Glm47MoeDetector, spark25 = same XML-KV wire format, emitted atomically.",
        ..BASE
    },
    Parser {
        name: "ling3",
        vllm: &["ling3"],
        sglang: &["ling3"],
        markers: glm::MARKERS,
        build: Build::Tool(glm::build),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 55, all: &[&[Sig::Template("<arg_key>")], &[Sig::Template("<|role_end|>")]], unless: &[] }],
        about: "GLM XML; vLLM also treats <tool_call> as reasoning end",
        ..BASE
    },
    Parser {
        name: "poolside_v1",
        vllm: &["poolside_v1"],
        sglang: &["poolside_v1"],
        markers: glm::MARKERS,
        build: Build::Tool(glm::build),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 55, all: &[&[Sig::Template("<arg_key>")], &[Sig::Template("available_tools")]], unless: &[] }],
        about: "GLM-4 XML with strings streamed incrementally",
        ..BASE
    },
    Parser {
        name: "minimax_m2",
        vllm: &["minimax_m2"],
        sglang: &["minimax-m2"],
        markers: invoke::MINIMAX_MARKERS,
        build: Build::Tool(invoke::build_minimax),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 20, all: &[&[Sig::Template("<minimax:tool_call>")]], unless: &[] }],
        about: "",
        ..BASE
    },
    Parser {
        name: "minimax_m3",
        vllm: &["minimax_m3"],
        sglang: &["minimax-m3"],
        markers: minimax_m3::MARKERS,
        build: Build::Tool(minimax_m3::build),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 18, all: &[&[Sig::Template("]<]minimax[>[")]], unless: &[] }],
        about: "every structural tag prefixed with ]<]minimax[>[; nested elements",
        ..BASE
    },
    Parser {
        name: "openai",
        vllm: &["openai"],
        sglang: &["gpt-oss"],
        markers: harmony::MARKERS,
        build: Build::Whole { family: "harmony", build: harmony::build },
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 10, all: &[&[Sig::Token("<|channel|>")], &[Sig::Token("<|message|>")]], unless: &[] }],
        about: "Harmony; vLLM parses token ids with openai_harmony (HarmonyParser), GptOssToolParser is a stub",
        ..BASE
    },
    Parser {
        name: "pythonic",
        vllm: &["pythonic"],
        sglang: &["pythonic"],
        markers: pythonic::MARKERS,
        build: Build::Tool(pythonic::build),
        ids: IdStyle::OpenAi,
        detect: &[],
        about: "[f(a=1), g()] Python literals",
        ..BASE
    },
    Parser {
        name: "llama4_pythonic",
        vllm: &["llama4_pythonic"],
        sglang: &[],
        markers: pythonic::MARKERS,
        build: Build::Tool(pythonic::build),
        ids: IdStyle::OpenAi,
        detect: &[],
        about: "pythonic with optional <|python_start|>…<|python_end|>",
        ..BASE
    },
    Parser {
        name: "olmo3",
        vllm: &["olmo3"],
        sglang: &[],
        markers: pythonic::OLMO3_MARKERS,
        build: Build::Tool(pythonic::build_olmo3),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 15, all: &[&[Sig::Template("<function_calls>")]], unless: &[] }],
        about: "newline-separated pythonic calls; null/true/false accepted",
        ..BASE
    },
    Parser {
        name: "lfm2",
        vllm: &["lfm2"],
        sglang: &["lfm2"],
        markers: pythonic::LFM2_MARKERS,
        build: Build::Tool(pythonic::build_lfm2),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 15, all: &[&[Sig::Template("<|tool_list_start|>"), Sig::Template("<|tool_call_start|>"), Sig::Token("<|tool_call_start|>")]], unless: &[] }],
        about: "pythonic list inside markers",
        ..BASE
    },
    Parser {
        name: "granite",
        vllm: &["granite"],
        sglang: &[],
        markers: jf::GRANITE_MARKERS,
        build: Build::Tool(jf::build_granite),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 15, all: &[&[Sig::Template("<|tool_call|>")]], unless: &[] }],
        about: "JSON array after the marker, no end marker",
        ..BASE
    },
    Parser {
        name: "granite-20b-fc",
        vllm: &["granite-20b-fc"],
        sglang: &[],
        markers: jf::GRANITE_20B_FC_MARKERS,
        build: Build::Tool(jf::build_granite_20b_fc),
        ids: IdStyle::OpenAi,
        detect: &[],
        about: "<function_call> {json} repeated, no end marker",
        ..BASE
    },
    Parser {
        name: "granite4",
        vllm: &["granite4"],
        sglang: &[],
        markers: hermes::MARKERS,
        build: Build::Tool(hermes::build),
        ids: IdStyle::OpenAi,
        detect: &[],
        about: "Hermes-like",
        ..BASE
    },
    Parser {
        name: "jamba",
        vllm: &["jamba"],
        sglang: &[],
        markers: jf::JAMBA_MARKERS,
        build: Build::Tool(jf::build_jamba),
        ids: IdStyle::OpenAi,
        detect: &[],
        about: "JSON array",
        ..BASE
    },
    Parser {
        name: "internlm",
        vllm: &["internlm"],
        sglang: &["interns1"],
        markers: jf::INTERNLM_MARKERS,
        build: Build::Tool(jf::build_internlm),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 15, all: &[&[Sig::Template("<|action_start|>"), Sig::Token("<|action_start|>")], &[Sig::Template("<|plugin|>"), Sig::Token("<|plugin|>")]], unless: &[] }],
        about: "JSON {name, parameters}",
        ..BASE
    },
    Parser {
        name: "phi4_mini_json",
        vllm: &["phi4_mini_json"],
        sglang: &[],
        markers: jf::PHI4_MINI_MARKERS,
        build: Build::Tool(jf::build_phi4_mini),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 15, all: &[&[Sig::Template("functools[")]], unless: &[] }],
        about: "",
        ..BASE
    },
    Parser {
        name: "xlam",
        vllm: &["xlam"],
        sglang: &[],
        markers: jf::XLAM_MARKERS,
        build: Build::Tool(jf::build_xlam),
        ids: IdStyle::OpenAi,
        detect: &[],
        about: "bare JSON array, sniffed in several wrappers",
        ..BASE
    },
    Parser {
        name: "hunyuan_a13b",
        vllm: &["hunyuan_a13b"],
        sglang: &[],
        markers: jf::JAMBA_MARKERS,
        build: Build::Tool(jf::build_jamba),
        ids: IdStyle::OpenAi,
        detect: &[],
        about: "JSON array in <tool_calls>",
        ..BASE
    },
    Parser {
        name: "hy_v3",
        vllm: &["hy_v3"],
        sglang: &["hunyuan"],
        markers: glm::HY_V3.markers,
        build: Build::Tool(glm::build_hy_v3),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 14, all: &[&[Sig::Template("<tool_sep{}>")]], unless: &[] }],
        about: "tags spelled with the checkpoint's token suffix (Hy3: <tool_calls:opensource>)",
        ..BASE
    },
    Parser {
        name: "hy_v4",
        vllm: &["hy_v4"],
        sglang: &[],
        markers: glm::HY_V4.markers,
        build: Build::Tool(glm::build_hy_v4),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 15, all: &[&[Sig::Template("<tool_calls{}>")]], unless: &[] }],
        about: "GLM-4.7 elements in <tool_calls>, tags spelled with the checkpoint's token suffix",
        ..BASE
    },
    Parser {
        name: "ernie45",
        vllm: &["ernie45"],
        sglang: &[],
        markers: hermes::MARKERS,
        build: Build::Tool(hermes::build),
        ids: IdStyle::OpenAi,
        detect: &[],
        about: "JSON in <tool_call>; also knows <think>/<response>",
        ..BASE
    },
    Parser {
        name: "longcat",
        vllm: &["longcat"],
        sglang: &[],
        markers: jf::LONGCAT_MARKERS,
        build: Build::Tool(jf::build_longcat),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 15, all: &[&[Sig::Template("<longcat_tool_call>")]], unless: &[] }],
        about: "Hermes-like with longcat_ markers",
        ..BASE
    },
    Parser {
        name: "dots",
        vllm: &["dots"],
        sglang: &["dots"],
        markers: invoke::DOTS_MARKERS,
        build: Build::Tool(invoke::build_dots),
        ids: IdStyle::OpenAi,
        detect: &[],
        about: "JSON object fallback inside the wrapper",
        ..BASE
    },
    Parser {
        name: "apertus",
        vllm: &["apertus"],
        sglang: &["apertus2509"],
        markers: jf::APERTUS_MARKERS,
        build: Build::Tool(jf::build_apertus),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 15, all: &[&[Sig::Template("<|tools_prefix|>")]], unless: &[] }],
        about: "[{\"NAME\": {args}}, ...]",
        ..BASE
    },
    Parser {
        name: "gigachat3",
        vllm: &["gigachat3"],
        sglang: &["gigachat3"],
        markers: jf::GIGACHAT3_MARKERS,
        build: Build::Tool(jf::build_gigachat3),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 17, all: &[&[Sig::Template("function call")], &[Sig::Template("role_sep")]], unless: &[] }],
        about: "",
        ..BASE
    },
    Parser {
        name: "functiongemma",
        vllm: &["functiongemma"],
        sglang: &[],
        markers: gemma::FUNCTIONGEMMA.markers,
        build: Build::Tool(gemma::build_functiongemma),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 15, all: &[&[Sig::Template("<start_function_call>")]], unless: &[] }],
        about: "",
        ..BASE
    },
    Parser {
        name: "gemma4",
        vllm: &["gemma4"],
        sglang: &["gemma4"],
        markers: gemma::GEMMA4.markers,
        build: Build::Tool(gemma::build_gemma4),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 15, all: &[&[Sig::Template("<|tool_call>")]], unless: &[] }],
        about: "string delimiter token <|\"|>",
        ..BASE
    },
    Parser {
        name: "step3",
        vllm: &["step3"],
        sglang: &["step3"],
        markers: invoke::STEP3_MARKERS,
        build: Build::Tool(invoke::build_step3),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 15, all: &[&[Sig::Template("<｜tool_calls_begin｜>")]], unless: &[] }],
        about: "markers use '_' not '▁'",
        ..BASE
    },
    Parser {
        name: "minicpm5",
        vllm: &["minicpm5"],
        sglang: &["minicpm5"],
        markers: invoke::MINICPM5_MARKERS,
        build: Build::Tool(invoke::build_minicpm5),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 15, all: &[&[Sig::Template("<tool_def_sep>")]], unless: &[] }],
        about: "CDATA allowed",
        ..BASE
    },
    Parser {
        name: "inkling",
        vllm: &["inkling"],
        sglang: &["inkling"],
        markers: inkling::MARKERS,
        build: Build::Tool(inkling::build),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 15, all: &[&[Sig::Template("<|content_invoke_tool_json|>")]], unless: &[] }],
        about: "{\"name\", \"args\"} JSON",
        ..BASE
    },
    Parser {
        name: "cohere_command3",
        vllm: &["cohere_command3"],
        sglang: &[],
        markers: jf::COHERE3_MARKERS,
        build: Build::Tool(jf::build_cohere3),
        ids: IdStyle::Format,
        detect: &[],
        pairs_with: "cohere_command3",
        about: "[{\"tool_call_id\", \"tool_name\", \"parameters\"}] in <|START_ACTION|>; splits reasoning too",
        ..BASE
    },
    Parser {
        name: "cohere_command4",
        vllm: &["cohere_command4"],
        sglang: &["cohere_command4"],
        markers: jf::COHERE4_MARKERS,
        build: Build::Tool(jf::build_cohere4),
        ids: IdStyle::Format,
        detect: &[],
        pairs_with: "cohere_command4",
        about: "as cohere_command3, <|START_TEXT|> wrappers too; splits reasoning too",
        ..BASE
    },
    Parser {
        name: "plamo3",
        vllm: &["plamo3"],
        sglang: &[],
        markers: plamo3::MARKERS,
        build: Build::Tool(plamo3::build),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 15, all: &[&[Sig::Template("<|plamo:begin_tool_requests:plamo|>")]], unless: &[] }],
        about: "",
        ..BASE
    },
    Parser {
        name: "muse",
        vllm: &["muse", "musespark1x"],
        sglang: &[],
        markers: muse::MARKERS,
        build: Build::Tool(muse::build),
        ids: IdStyle::OpenAi,
        detect: &[],
        about: "",
        ..BASE
    },
    Parser {
        name: "muse_glimmer",
        vllm: &["muse_glimmer"],
        sglang: &["muse"],
        markers: muse::MARKERS,
        build: Build::Tool(muse::build_glimmer),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 15, all: &[&[Sig::Template("<atem:function_calls>")]], unless: &[] }],
        about: "",
        ..BASE
    },
    Parser {
        name: "beam",
        vllm: &["beam"],
        sglang: &["beam"],
        markers: &[],
        build: Build::Template,
        ids: IdStyle::OpenAi,
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
        ids: IdStyle::OpenAi,
        detect: &[],
        about: "the model's response_template (tokenizer_config.json) interpreted; one stage with the hf/beam reasoning row",
        ..BASE
    },
    Parser {
        name: "gigachat35",
        vllm: &[],
        sglang: &["gigachat35"],
        markers: invoke::GCML_MARKERS,
        build: Build::Tool(invoke::build_gcml),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 15, all: &[&[Sig::Template("｜GCML｜")]], unless: &[] }],
        about: "",
        ..BASE
    },
    Parser {
        name: "iquest_q1",
        vllm: &[],
        sglang: &["iquest_q1"],
        markers: glm::IQUEST_MARKERS,
        build: Build::Tool(glm::build_iquest),
        ids: IdStyle::OpenAi,
        detect: &[Detect { rank: 15, all: &[&[Sig::Template("<iquest_tool_call>")]], unless: &[] }],
        about: "Glm47MoeDetector subclass",
        ..BASE
    },
];
