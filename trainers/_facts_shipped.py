"""The bundled models' facts as trainers.models.model_facts counted them (trainers/_facts.py), each
with its config's digest: (digest, parameters, vocab, layers, KV heads, 4-bit weights). Written by
`python tools/model_facts.py`; do not edit."""

TRANSFORMERS = "5.17.0"
RULE = 1
FACTS = {
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": ("4309014f651c857c", 1777088000, 151936, 28, 2, 1310195712),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B": ("77ae0449cc9bd6d8", 7615616512, 152064, 28, 4, 6525288448),
    "meta-llama/Llama-3.1-8B-Instruct": ("48680d5955c910a8", 8030261248, 128256, 32, 8, 6979321856),
    "meta-llama/Llama-3.2-1B-Instruct": ("2830fc49567197d0", 1235814400, 128256, 16, 8, 973078528),
    "meta-llama/Llama-3.2-3B-Instruct": ("c1f414fdff155758", 3212749824, 128256, 28, 8, 2818572288),
    "mistralai/Mistral-7B-Instruct-v0.3": ("9225f6e2fb6f60c5", 7248023552, 32768, 32, 8, 6979321856),
    "microsoft/Phi-4-mini-instruct": ("bc6bf542e0271d82", 3836021760, 200064, 32, 8, 3221225472),
    "Qwen/Qwen2.5-0.5B-Instruct": ("df79509e3ee309f6", 494032768, 151936, 24, 2, 357826560),
    "Qwen/Qwen2.5-1.5B-Instruct": ("aa8be081c227ea4a", 1543714304, 151936, 28, 2, 1310195712),
    "Qwen/Qwen2.5-14B-Instruct": ("3a3f3da53d9d4ec6", 14770033664, 152064, 48, 8, 13212057600),
    "Qwen/Qwen2.5-32B-Instruct": ("caa495a12a6a4b8f", 32763876352, 152064, 64, 8, 31205621760),
    "Qwen/Qwen2.5-3B-Instruct": ("a66532cb65b0b02d", 3085938688, 151936, 36, 2, 2774532096),
    "Qwen/Qwen2.5-7B-Instruct": ("576a793f5eda6167", 7615616512, 152064, 28, 4, 6525288448),
    "Qwen/Qwen3-0.6B": ("1d079457d2e1f043", 596049920, 151936, 28, 8, 440401920),
    "Qwen/Qwen3-1.7B": ("1c10900bceb1b764", 1720574976, 151936, 28, 8, 1409286144),
    "Qwen/Qwen3-14B": ("1c5d9fb7c41cefc0", 14768307200, 151936, 40, 8, 13212057600),
    "Qwen/Qwen3-30B-A3B": ("01bdf6c5ef6d1329", 30532122624, 151936, 48, 4, 905969664),
    "Qwen/Qwen3-32B": ("fdfce4c485a76429", 32762123264, 151936, 64, 8, 31205621760),
    "Qwen/Qwen3-4B": ("46d67ee584c483e8", 4022468096, 151936, 36, 8, 3633315840),
    "Qwen/Qwen3-8B": ("28f223c87cf98741", 8190735360, 151936, 36, 8, 6945767424),
    "HuggingFaceTB/SmolLM3-3B": ("9f433beeea2d2554", 3075098624, 128256, 36, 4, 2812280832),
    "google/gemma-3-12b-it": ("4ee2977ac68bb1d7", 11766034176, 262208, 48, 8, 10758389760),
    "google/gemma-3-1b-it": ("1247d3c0dcbe1d03", 999885952, 262144, 26, 1, 697761792),
    "google/gemma-3-4b-it": ("e12e1b529ed1c871", 3880263168, 262208, 34, 4, 3208642560),
    "smollm2": ("301184e75e0b729a", 134515008, 49152, 30, 3, 106168320),
}
