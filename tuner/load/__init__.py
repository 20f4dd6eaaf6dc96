"""The load client, at parity with `vllm bench serve`: what a trial or `bench` sends and how it is measured.

    workload   request length distributions and prompt token ids (vLLM's conventions)
    arrivals   when each request is sent: closed loop, gamma gaps, ramp-up, a trace's timestamps
    trace      lengths (and send times) replayed from a CSV / JSONL trace, vLLM's timed_trace included
    datasets   the dataset a command line names; ShareGPT / custom JSONL read as vLLM reads them
    multimodal vLLM's random-mm: its flags, its image sampling for a seed, the image parts a chat request carries
    tokenizer  which token ids a prompt may use: the vocabulary read offline or learned from the server
    client     the async streaming client (completions and chat) that runs one load test
    sse        one streamed response read as vLLM's client reads it (TTFT, ITL, usage, errors)
    options    how one load test runs (LoadOptions: concurrency, arrivals, warm pass, percentiles)
    metrics    per-request records and the aggregate metrics, with vLLM's formulas and field names
"""
