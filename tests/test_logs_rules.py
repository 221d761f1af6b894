"""The one rule table (tpu_devops/logs/rules.py): every rule recognises at least two real wordings of its
fault (older and newer vLLM / XLA / libtpu / huggingface_hub / Docker / guest agent), through the same
anchor prefilter the whole-log scan uses, and no wording of one rule is read as another.

Where a wording comes from is noted per line: an upstream source file, an issue thread, or a field report
(personal data replaced). Lines carry the logger prefix they were printed with.
"""

from __future__ import annotations

import pytest

from tpu_devops.logs import signatures as sg
from tpu_devops.logs.rules import SIGNATURES

EC = "(EngineCore pid=187) ERROR 08-07 23:27:17 [core.py:1349] "
EC_OLD = "ERROR 07-17 10:21:33 core.py:586] "  # vLLM <= 0.6 prefix without "["

WORDINGS: dict[str, list[str]] = {
    "program-allocation-oom": [
        # vLLM 0.26 / newer libtpu with the E0101 code (fixtures/vllm-logs/v5e1-e2b-util095-program-oom.log)
        EC + "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: E0101: RuntimeProgramAllocationFailure:",
        # older XLA runtime, no code (openxla error_0101 page sample; marin RL logs)
        "XlaRuntimeError: RESOURCE_EXHAUSTED: Error loading program 'jit_embedding_pipeline_step_fn': Attempting to "
        "reserve 29.49G at the bottom of memory. That was not possible. There are 147.64M free, 0B reserved, and "
        "147.64M reservable.",
        # libtpu builds that do not name the program (the same allocation failure)
        EC
        + "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Error loading program: Attempting to reserve 1.04G at "
        "the bottom of memory. That was not possible. There are 812.20M free, 0B reserved, and 812.20M reservable.",
    ],
    "kv-cache-too-small": [
        # vLLM 0.9-0.11 (tpu-inference PR #223; field report B01)
        EC_OLD
        + "ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV "
        "cache is needed, which is larger than the available KV cache memory (0.71 GiB). Based on the available "
        "memory, the estimated maximum model length is 5632. Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine.",
        # later vLLM: "model's", no parenthesis before the GiB figure
        "ValueError: To serve at least one request with the model's max seq len (262144), 9.29 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (9.28 GiB). Based on the available memory, the "
        "estimated maximum model length is 260800.",
        # V0 engine
        "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be "
        "stored in KV cache (16832). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
        "initializing the engine.",
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
        "initializing the engine.",
    ],
    "hbm-oom": [
        # compile-time (EasyDeL#142, jax on TPU)
        "XlaRuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space "
        "hbm. Used 30.21G of 15.48G hbm. Exceeded hbm capacity by 14.73G.",
        # newer libtpu (qwix concrete path on v5e: public run notes)
        EC
        + "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required "
        "for HLO temporaries (16.23G) exceeds available HBM (15.75G).",
        # runtime allocation
        "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate "
        "2.50G. That was not possible. There are 1.20G free.",
    ],
    "vmem-oom": [
        # vLLM 0.20 + tpu-inference on v7x (tpu-inference#2803; field report B18)
        "(EngineCore pid=106339) ERROR 06-03 07:41:11 [core.py:1184] jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: "
        "XLA:TPU compile permanent error. Ran out of memory in memory space vmem. Used 76.58M of 64.00M vmem. "
        "Exceeded vmem capacity by 12.58M.",
        # newer XLA error code (tpu-inference#2458)
        "(EngineCore pid=927827) jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: E1001: CompileTimeScopedVmemOom:",
        # torch_xla era (pytorch/xla#9524)
        "RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory "
        "in memory space vmem. Used 32.42M of 16.00M vmem. Exceeded vmem capacity by 16.42M",
    ],
    "smem-oom": [
        # vLLM 0.6 torch_xla (vllm-project/vllm#8318)
        "RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory "
        "in memory space smem. Used 1.00M of 1.00M smem. Exceeded smem capacity by 1.7K.",
        EC
        + "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: SMEM exhausted while compiling ragged_paged_attention",
    ],
    "weight-load-mismatch": [
        # vLLM 0.26 AutoWeightsLoader (fixtures/vllm-logs/v5e1-e2b-qwix-int8-abstract-fail.log)
        EC
        + "ValueError: There is no module or parameter named 'model.language_model.layers.0.mlp.down_proj.weight' "
        "in Gemma4ForConditionalGeneration. The available parameters belonging to model.language_model.layers.0."
        "mlp.down_proj (JaxLinear) are: set()",
        # older model load_weights: params_dict[name]
        "KeyError: 'model.layers.0.self_attn.qkv_proj.weight_scale'",
    ],
    "chunked-mm-floor": [
        EC + "ValueError: Chunked MM input disabled but max_tokens_per_mm_item (2496) is larger than "
        "max_num_batched_tokens (2048). Please increase max_num_batched_tokens.",
        "ValueError: Chunked MM input disabled but max_tokens_per_mm_item (4096) is larger than "
        "max_num_batched_tokens (2048).",
    ],
    "invalid-kv-cache-dtype": [
        # Python < 3.12.8 argparse quotes the choices, later releases do not
        "vllm serve: error: argument --kv-cache-dtype: invalid choice: 'int8' (choose from 'auto', 'fp8', "
        "'fp8_e5m2', 'fp8_e4m3')",
        "vllm serve: error: argument --kv-cache-dtype: invalid choice: 'int8' (choose from auto, bfloat16, fp8)",
    ],
    "tp-sharding-mismatch": [
        # vLLM config check
        "ValueError: Total number of attention heads (32) must be divisible by tensor parallel size (3).",
        # tpu-inference layers/common/attention_interface.py
        EC + "ValueError: For GQA/MQA, tp_size 6 must be divisible by num_kv_heads 4",
        # tpu-inference layers/vllm/custom_ops/linear.py
        "AssertionError: tp_size (6) must be divisible by total_num_kv_heads (4) for KV-head replication",
    ],
    "torchax-model-failure": [
        # google/torchax#12
        "torchax.tensor.OperatorNotFound: Operator with name aten::_nested_tensor_from_mask_left_aligned has no "
        "lowering",
        # tpu-inference PR #76
        "ERROR 06-23 23:20:47 [core.py:521] AssertionError: torchax Tensors can only do math within the torchax "
        "environment.Please wrap your code with `with torchax.default_env()` or call torchax.enable_globally() before.",
    ],
    "torchax-tensor-elem": [
        # vllm-project/tpu-inference PR #3176 (Gemma 4 E2B on MODEL_IMPL_TYPE=vllm), as the engine logs it
        EC + "AttributeError: 'Tensor' object has no attribute '_elem'",
        # the same, raised in the API server process without a logger prefix
        "(APIServer pid=1) AttributeError: 'Tensor' object has no attribute '_elem'. Did you mean: '_base'?",
    ],
    "quantization-unsupported-on-platform": [
        # vLLM Platform.verify_quantization inside pydantic's ValidationError (field report C15)
        "(APIServer pid=1)   Value error, gptq quantization is currently not supported in tpu. [type=value_error, "
        "input_value=ArgsKwargs((), {'model': 'x', 'quantization': 'gptq'}), input_type=ArgsKwargs]",
        # older vLLM raising it directly
        "ValueError: bitsandbytes quantization is currently not supported in tpu.",
        # tpu-inference get_tpu_quantization_config
        EC + "NotImplementedError: gptq_marlin quantization method not supported. Supported methods are "
        "dict_keys([None, 'compressed-tensors', 'awq', 'fp8'])",
        # another platform (a public ROCm report)
        "ValueError: moe_wna16 quantization is currently not supported in ROCm.",
    ],
    "parser-tokens-missing": [
        # vllm-project/recipes#515 (field report C16)
        "(APIServer pid=3999) RuntimeError: Gemma4ReasoningParser reasoning parser could not locate think start/end "
        "tokens in the tokenizer!",
        # a DeepSeek tool parser on a Qwen3-based distill (public report)
        "RuntimeError: DeepSeek-V3 Tool parser could not locate tool call start/end tokens in the tokenizer!",
        "RuntimeError: Qwen3 XML Tool parser could not locate tool call start/end tokens in the tokenizer!",
    ],
    "transformers-per-layer-attribute": [
        # vllm-project/vllm#52768 (field report C13)
        "(APIServer pid=7) transformers.integrations.heterogeneity.configuration_utils.AmbiguousGlobalPerLayer"
        "AttributeError: 'head_dim' is a per-layer attribute and may vary across layers. Access it via the individual "
        "layer configs instead (e.g. config.per_layer_config[i].head_dim).",
        # RBLN-SW/vllm-rbln#1092: the message on the line after the exception type
        "'head_dim' is a per-layer attribute and may vary across layers. Access it via the",
    ],
    "transformers-unknown-model-type": [
        # transformers AutoConfig (a transformers older than the model)
        "ValueError: The checkpoint you are trying to load has model type `gemma4_unified` but Transformers does not "
        "recognize this architecture. This could be because of an issue with the checkpoint, or because your "
        "version of Transformers is out of date.",
        # vLLM's model registry (a vLLM older than the architecture)
        "ValueError: Model architectures ['Gemma4ForConditionalGeneration'] are not supported for now. Supported "
        "architectures: dict_keys(['AquilaModel', 'LlamaForCausalLM'])",
    ],
    "killed-by-startup-probe": [
        # vLLM api_server signal_handler (vllm-project/vllm#17386; field report C04)
        "(APIServer pid=1) KeyboardInterrupt: terminated",
        "KeyboardInterrupt: terminated",
        # the kubelet's event (a GKE export as `logs.kube_events` writes it)
        "Normal Killing Pod default/vllm-7d9f8c6b5-x2k4q: Container vllm failed startup probe, will be restarted",
    ],
    "killed-by-liveness-probe": [
        "Normal Killing Pod default/vllm-7d9f8c6b5-x2k4q: Container vllm failed liveness probe, will be restarted (x2)",
        # older kubelet
        "Killing container with id docker://vllm:Container failed liveness probe.. Container will be killed and "
        "recreated.",
    ],
    "k8s-node-selector-mismatch": [
        # field report C02 (huggingface/optimum-tpu#43, #74)
        "Warning FailedScheduling Pod default/vllm-7d9f8c6b5-x2k4q: 0/3 nodes are available: 1 node(s) had "
        "untolerated taint {google.com/tpu: present}, 3 node(s) didn't match Pod's node affinity/selector. "
        "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
        "Normal NotTriggerScaleUp Pod default/vllm-7d9f8c6b5-x2k4q: pod didn't trigger scale-up: 1 node(s) didn't "
        "match Pod's node affinity/selector",
        # kube-scheduler before 1.22
        "0/2 nodes are available: 2 node(s) didn't match node selector.",
    ],
    "k8s-tpu-taint-not-tolerated": [
        "Warning FailedScheduling Pod default/vllm-x: 0/3 nodes are available: 1 node(s) had untolerated taint "
        "{google.com/tpu: present}, 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are "
        "available: 3 Preemption is not helpful for scheduling.",
        # kube-scheduler before 1.25
        "0/1 nodes are available: 1 node(s) had taint {google.com/tpu: present}, that the pod didn't tolerate.",
    ],
    "k8s-insufficient-tpu": [
        # a new TPU node whose device plugin has not registered the chips yet
        "Warning FailedScheduling Pod default/vllm-x: 0/3 nodes are available: 1 Insufficient google.com/tpu, 2 "
        "node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 1 No preemption "
        "victims found for incoming pod, 2 Preemption is not helpful for scheduling.",
        # kubelet admission (OutOfgoogle.com/tpu)
        "Warning OutOfgoogle.com/tpu Pod default/vllm-x: Node didn't have enough resource: google.com/tpu, "
        "requested: 1, used: 0, capacity: 0",
    ],
    "k8s-scale-up-quota": [
        # cluster-autoscaler FailedScaleUp
        "Warning FailedScaleUp Pod default/vllm-x: Node scale up in zones us-west4-a associated with this pod "
        "failed: GCE quota exceeded. Pod is at risk of not being scheduled.",
        # Compute Engine's answer to the node pool's instance create
        "Instance 'gke-tpu-cluster-tpu-pool-1a2b3c-x9z8' creation failed: Quota 'TPU_LITE_PODSLICE_V5' exceeded.  "
        "Limit: 0.0 in region us-west4.",
        # cluster-autoscaler visibility log
        '{"resultInfo":{"results":[{"errorMsg":{"messageId":"scale.up.error.quota.exceeded","parameters":'
        '["PREEMPTIBLE_TPU_LITE_PODSLICE_V5"]}}]}}',
    ],
    "k8s-scale-up-stockout": [
        "Warning FailedScaleUp Pod default/vllm-x: Node scale up in zones us-west4-a associated with this pod "
        "failed: GCE out of resources. Pod is at risk of not being scheduled.",
        '{"resultInfo":{"results":[{"errorMsg":{"messageId":"scale.up.error.out.of.resources","parameters":[]}}]}}',
    ],
    "k8s-unschedulable": [
        "Warning FailedScheduling Pod default/vllm-x: 0/3 nodes are available: 1 Insufficient memory, 2 node(s) "
        "didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not "
        "helpful for scheduling.",
        "0/1 nodes are available: 1 node(s) had volume node affinity conflict.",
    ],
    "k8s-no-scale-up": [
        "Normal NotTriggerScaleUp Pod default/vllm-x: pod didn't trigger scale-up: 1 max node group size reached",
        "pod didn't trigger scale-up (it wouldn't fit if a new node is added): 2 Insufficient memory",
    ],
    "k8s-hpa-no-custom-metrics": [
        # field report C06 (prometheus-operator/kube-prometheus#1232 wording)
        "Warning FailedGetPodsMetric HorizontalPodAutoscaler default/vllm-gemma4-e2b: unable to get metric "
        "prometheus.googleapis.com|vllm:num_requests_waiting|gauge: unable to fetch metrics from custom metrics API: "
        "no custom metrics API (custom.metrics.k8s.io) registered",
        "Warning FailedComputeMetricsReplicas HorizontalPodAutoscaler default/vllm-gemma4-e2b: invalid metrics (1 "
        "invalid out of 1), first error is: failed to get pods metric value: unable to get metric "
        "prometheus.googleapis.com|vllm:num_requests_waiting|gauge: unable to fetch metrics from custom metrics API: "
        "no custom metrics API (custom.metrics.k8s.io) registered",
        # an APIService registered without a running adapter
        "unable to get metric vllm:num_requests_waiting: unable to fetch metrics from custom metrics API: the server "
        "could not find the requested resource (get pods.custom.metrics.k8s.io *)",
    ],
    "k8s-hpa-metric-missing": [
        "Warning FailedGetPodsMetric HorizontalPodAutoscaler default/vllm: unable to get metric "
        "prometheus.googleapis.com|vllm:num_requests_waiting|gauge: unable to fetch metrics from custom metrics API: "
        "the server could not find the metric prometheus.googleapis.com|vllm:num_requests_waiting|gauge for pods",
        "failed to get pods metric value: unable to get metric vllm:num_requests_waiting: no metrics returned from "
        "custom metrics API",
    ],
    "k8s-probe-not-passing": [
        'Warning Unhealthy Pod default/vllm-x: Startup probe failed: Get "http://10.8.0.12:8000/health": dial tcp '
        "10.8.0.12:8000: connect: connection refused (x40)",
        "Warning Unhealthy Pod default/vllm-x: Readiness probe failed: HTTP probe failed with statuscode: 503",
    ],
    "cli-argument-error": [
        "vllm serve: error: unrecognized arguments: --max-model-length 8192",
        "api_server.py: error: unrecognized arguments: --disable-log-requests",
    ],
    "tool-parser-invalid": [
        # vllm cli_args.py validate_parsed_serve_args
        "TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser",
        # vLLM 0.17 image without the gemma4 parser (public deployment notes)
        "KeyError: 'invalid tool call parser: gemma4 (chose from { deepseek_v3, functiongemma, hermes, pythonic })'",
    ],
    "tpu-busy": [
        "RuntimeError: Unable to initialize backend 'tpu': ABORTED: The TPU is already in use by process with pid 4242.",
        "RuntimeError: TPU initialization failed: open(/dev/vfio/0): Device or resource busy: Device or resource busy",
    ],
    "hf-rate-limited": [
        # transformers 4.25 (huggingface/transformers#21129; field report B03)
        "OSError: There was a specific connection error when trying to load google/gemma-4-E2B-it: 429 Client "
        "Error: Too Many Requests for url: https://huggingface.co/google/gemma-4-E2B-it/resolve/main/config.json",
        # requests via transformers 4.4x (huggingface/transformers#34841)
        "requests.exceptions.HTTPError: 429 Client Error: Too Many Requests for URL: "
        "https://huggingface.co/meta-llama/Meta-Llama-3-8B/resolve/main/config.json",
        # huggingface_hub retry warning (vllm-project/guidellm#778)
        "WARNING  huggingface_hub.utils._http:_http.py:446 HTTP Error 429 thrown while requesting HEAD "
        "https://huggingface.co/gpt2/resolve/main/config.json",
    ],
    "hf-gated-repo": [
        "huggingface_hub.errors.GatedRepoError: 403 Client Error. Cannot access gated repo for url "
        "https://huggingface.co/google/gemma-4-E2B-it/resolve/main/config.json.",
        # the Hub's 403 texts (ariG23498/gemma3-object-detection#5; a pending access request)
        "Access to model google/gemma-3-4b-pt is restricted and you are not in the authorized list. Visit "
        "https://huggingface.co/google/gemma-3-4b-pt to ask for access.",
        "Your request to access model google/gemma-4-E2B-it is awaiting a review from the repo authors.",
        "403 Forbidden: Please enable access to public gated repositories in your fine-grained token settings to "
        "view this repository.",
    ],
    "hf-gated-unauthenticated": [
        # huggingface_hub >= 0.23 (city96/ComfyUI_ExtraModels#99)
        "huggingface_hub.errors.GatedRepoError: 401 Client Error. (Request ID: Root=1-67545d8b-604123b6)",
        "Access to model google/gemma-2-2b-it is restricted. You must have access to it and be authenticated to "
        "access it. Please log in.",
        # older Hub text (ml-explore/mlx-examples#759), and transformers' OSError wrapping the same message
        "Access to model mistralai/Mistral-7B-Instruct-v0.2 is restricted. You must be authenticated to access it.",
        "OSError: You are trying to access a gated repo. Access to model google/gemma-4-E2B-it is restricted. "
        "You must have access to it and be authenticated to access it. Please log in.",
        "Repo model meta-llama/Llama-2-7b-hf is gated. You must be authenticated to access it.",
    ],
    "hf-gated-access": [
        "Cannot access gated repo for url https://huggingface.co/google/gemma-4-E2B-it/resolve/main/config.json.",
        "OSError: You are trying to access a gated repo.",
        "huggingface_hub.errors.GatedRepoError: Cannot access gated repo for url "
        "https://huggingface.co/api/models/google/gemma-4-E2B-it/auth-check.",
    ],
    "hf-repo-not-found": [
        "huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. Repository Not Found for url: "
        "https://huggingface.co/api/models/google/gemma-4-E2B",
        "OSError: google/gemma-4-E2 is not a valid model identifier listed on 'https://huggingface.co/models'",
    ],
    "hf-unauthorized": [
        "requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: "
        "https://huggingface.co/api/models/google/gemma-4-E2B-it",
        "huggingface_hub.errors.HfHubHTTPError: Invalid credentials in Authorization header",
    ],
    "hf-unreachable": [
        "OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find it in the cached "
        "files and it looks like google/gemma-4-E2B-it is not the path to a directory containing a file named "
        "config.json.",
        "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries "
        "exceeded with url: /api/models/google/gemma-4-E2B-it (Caused by NameResolutionError)",
        "huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to locate the file on the "
        "Hub and we cannot find the requested files in the local cache.",
    ],
    "image-pull-failed": [
        # docker 20+ (vllm-project/vllm#17114; field report B08)
        "startup-script: docker: Error response from daemon: manifest for vllm/vllm-tpu:latest not found: manifest "
        "unknown: manifest unknown.",
        "startup-script: docker: Error response from daemon: pull access denied for vllm/vllm-tpu-nightly, "
        "repository does not exist or may require 'docker login': denied: requested access to the resource is denied.",
        # podman
        "Error: initializing source docker://vllm/vllm-tpu:v9.9.9: reading manifest v9.9.9 in "
        "docker.io/vllm/vllm-tpu: manifest unknown",
        # containerd through the kubelet (a GKE Failed event as `logs.kube_events` writes it)
        'Warning Failed Pod default/vllm-7d9f8c6b5-x2k4q: Failed to pull image "vllm/vllm-tpu:latest": rpc error: '
        'code = NotFound desc = failed to pull and unpack image "docker.io/vllm/vllm-tpu:latest": failed to resolve '
        'reference "docker.io/vllm/vllm-tpu:latest": docker.io/vllm/vllm-tpu:latest: not found',
        # older containerd / kubelet wording
        'Failed to pull image "vllm/vllm-tpu:v0.99.0": rpc error: code = NotFound desc = failed to pull and unpack '
        'image "docker.io/vllm/vllm-tpu:v0.99.0": docker.io/vllm/vllm-tpu:v0.99.0: not found',
    ],
    "image-pull-unauthorized": [
        # containerd against Artifact Registry without the reader role
        'Warning Failed Pod default/vllm-x: Failed to pull image "us-docker.pkg.dev/p/r/vllm-tpu:v0.30.0": rpc error: '
        'code = Unknown desc = failed to pull and unpack image "us-docker.pkg.dev/p/r/vllm-tpu:v0.30.0": failed to '
        'resolve reference "us-docker.pkg.dev/p/r/vllm-tpu:v0.30.0": failed to authorize: failed to fetch oauth '
        "token: unexpected status from GET request to https://us-docker.pkg.dev/v2/token?scope=repository%3Ap%2Fr"
        "%3Apull&service=us-docker.pkg.dev: 403 Forbidden",
        # docker against Artifact Registry
        'startup-script: docker: Error response from daemon: denied: Permission "artifactregistry.repositories.'
        'downloadArtifacts" denied on resource "projects/p/locations/us/repositories/r" (or it may not exist).',
    ],
    "image-pull-backoff": [
        # kubelet events (Kubernetes images documentation)
        "Warning Failed Pod default/vllm-7d9f8c6b5-x2k4q: Error: ErrImagePull",
        'Normal BackOff Pod default/vllm-7d9f8c6b5-x2k4q: Back-off pulling image "vllm/vllm-tpu:latest" (x4)',
        "Warning Failed Pod default/vllm-7d9f8c6b5-x2k4q: Error: ImagePullBackOff",
    ],
    "container-name-conflict": [
        # Docker daemon (a restart without docker rm)
        'startup-script: docker: Error response from daemon: Conflict. The container name "/vllm" is already in use '
        'by container "4c1e0f3a9b2d". You have to remove (or rename) that container to be able to reuse that name.',
        # podman
        'Error: creating container storage: the container name "vllm" is already in use by 4c1e0f3a9b2d. You have '
        "to remove that container to be able to reuse that name: that name is already in use",
    ],
    "port-in-use": [
        # vLLM's own socket bind (Python)
        "(APIServer pid=1) OSError: [Errno 98] Address already in use",
        # uvicorn's bind
        "(APIServer pid=1) ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): "
        "address already in use",
        # Docker publishing a port (-p 8000:8000)
        "docker: Error response from daemon: driver failed programming external connectivity on endpoint vllm "
        "(3f2a): Bind for 0.0.0.0:8000 failed: port is already allocated.",
    ],
    "image-pull-rate-limited": [
        "docker: Error response from daemon: toomanyrequests: You have reached your pull rate limit. You may "
        "increase the limit by authenticating and upgrading: https://www.docker.com/increase-rate-limit.",
        "Error response from daemon: toomanyrequests: You have reached your unauthenticated pull rate limit. "
        "https://www.docker.com/increase-rate-limit",
    ],
    "startup-script-failed": [
        "startup-script exit status 125",  # older guest agent
        'Script "startup-script" failed with error: exit status 1',  # guest-agent metadata_script_runner
    ],
    "chat-template-missing": [
        # vLLM 0.19 (vllm-project/vllm#39279; field report B06)
        "(APIServer pid=1) ERROR 04-08 10:12:03 [serving_chat.py:257] vllm.entrypoints.chat_utils."
        "ChatTemplateResolutionError: As of transformers v4.44, default chat template is no longer allowed, so you "
        "must provide a chat template if the tokenizer does not define one.",
        # older vLLM: ValueError, as the 400 body the client sees
        "openai.BadRequestError: Error code: 400 - {'object': 'error', 'message': 'As of transformers v4.44, default "
        "chat template is no longer allowed, so you must provide a chat template if the tokenizer does not define "
        "one. None', 'type': 'BadRequestError', 'param': None, 'code': 400}",
        "ValueError: Cannot use chat template functions because tokenizer.chat_template is not set and no template "
        "argument was passed!",
    ],
    "llamacpp-context-exceeded": [
        # llama.cpp tools/server, older wording: the numbers only in the body (field report C17)
        '{"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it", '
        '"type": "exceed_context_size_error", "n_prompt_tokens": 1140, "n_ctx": 1024}}',
        # newer wording with the numbers in the message
        "request (9761 tokens) exceeds the available context size (8192 tokens), try increasing it",
        # llama-server's own log line (send_error)
        "srv    send_error: task id = 12, error: the request exceeds the available context size, try increasing it",
    ],
    "tool-choice-not-enabled": [
        'ValueError: "auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
        'openai.BadRequestError: Error code: 400 - {"object":"error","message":"\\"auto\\" tool choice requires '
        '--enable-auto-tool-choice and --tool-call-parser to be set","type":"BadRequestError","code":400}',
    ],
    "engine-core-failed": [
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
        EC + "EngineCore failed to start.",
        "RuntimeError: Engine process failed to start. See stack trace for the root cause.",  # V0 MQLLMEngine
    ],
    "engine-dead": [
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for "
        "the root cause.",
        "(APIServer pid=1) ERROR 09-01 10:00:00 [async_llm.py:420] EngineDeadError: EngineCore encountered an issue.",
    ],
    "tpu-preempted": [
        "compute.instances.preempted projects/p/zones/us-west4-a/instances/n: Instance was preempted.",
        "TPU node gemma4-qr-node state: PREEMPTED",
    ],
    "tpu-maintenance": [
        "Host maintenance event: TERMINATE_ON_HOST_MAINTENANCE for instance n",
        "compute.instances.terminateOnHostMaintenance projects/p/zones/z/instances/n",
    ],
    "api-rate-limited": [
        # field report B13 (marin PR #6198)
        "Quota exceeded for quota metric 'Create requests' and limit 'Create requests per minute per project' of "
        "service 'tpu.googleapis.com' for consumer 'project_number:000000000000'.",
        "google.api_core.exceptions.TooManyRequests: 429 RATE_LIMIT_EXCEEDED",
    ],
    "quota-exhausted": [
        "Quota 'TPUV5sLitepodPerProjectPerZoneForTPUAPI' exhausted. Limit 1 in region us-west4",
        "QUOTA_EXCEEDED: Insufficient quota to satisfy the request",
    ],
    "capacity-stockout": [
        'There is no more capacity in the zone "us-west4-a"; you can try in another zone',
        "ZONE_RESOURCE_POOL_EXHAUSTED: The zone does not have enough resources available",
    ],
    "provisioning-model-unsupported": [
        'FLEX_START provisioning model is not supported for accelerator type "v5litepod-1" in location '
        '"europe-west4-a"',
        'SPOT provisioning model is not supported for accelerator type "v6e-8" in location "us-east5-a".',
        # Cloud TPU error glossary ("Invalid Accelerator Type")
        "generic::invalid_argument: Accelerator type v2-512 as preemptible (false) and reserved (false) is not "
        "available in zone us-central1-a, please contact support.",
    ],
    "kv-fp8-auto-logged": [
        "INFO 08-10 17:53:44 [tpu_platform.py:177] Automatically using fp8_e5m2 for FP8 KV cache on TPU v6e.",
        "INFO 08-10 17:53:44 [tpu_platform.py:177] Automatically using fp8 for FP8 KV cache.",
    ],
    "block-size-scaled": [
        "WARNING 08-07 23:11:08 [tpu_platform.py:303] Increase the page size from 16 to 32 to avoid SMEM OOM",
        "(APIServer pid=1) WARNING 08-10 17:54:05 [tpu_platform.py:303] Increase the page size from 16 to 64 to "
        "avoid SMEM OOM",
    ],
    "torchax-fallback": [
        "WARNING 04-02 21:10:00 [model_loader.py:660] Model architectures ['Qwen3VLForConditionalGeneration'] not "
        "registered in tpu-inference. Falling back to vLLM-native Pytorch definition. JAX-native architectures: []",
        "Model architectures ['MistralForCausalLM'] not registered in tpu-inference. Falling back to vLLM-native "
        "Pytorch definition.",
    ],
    "vllm-c-missing": [
        'WARNING 08-07 23:10:49 [interface.py:368] Failed to import from vllm._C: ModuleNotFoundError("No module '
        "named 'vllm._C'\")",
        'WARNING 10-14 03:43:44 _custom_ops.py:19] Failed to import from vllm._C with ModuleNotFoundError("No '
        "module named 'vllm._C'\")",
    ],
    "triton-absent": [
        "INFO 08-07 23:10:46 [importing.py:53] Triton is installed but 0 active driver(s) found (expected 1).",
        "INFO 10-14 03:43:44 importing.py:10] Triton not installed; certain GPU-related functions will not be "
        "available.",  # vllm-project/vllm#9331
    ],
    "pin-memory": [
        "WARNING 08-07 23:10:36 [tpu_platform.py:402] Pin memory is not supported on TPU.",
        "WARNING 10-14 03:43:50 utils.py:772] Pin memory is not supported on XLA.",
    ],
    "inductor-disabled": [
        "WARNING 08-07 23:11:08 [vllm.py:1222] Inductor compilation was disabled by user settings",
        "(APIServer pid=1) WARNING 08-10 17:54:05 [vllm.py:1247] Inductor compilation was disabled by user "
        "settings, optimizations settings that are only active during inductor compilation will be ignored.",
    ],
    "donated-buffers": [
        "UserWarning: Some donated buffers were not usable: int32[8], int32[8].",
        "/usr/local/lib/python3.12/site-packages/jax/_src/interpreters/mlir.py:1153: UserWarning: Some donated "
        "buffers were not usable: ShapedArray(float32[128])",
    ],
    "metadata-404": [
        "requests.exceptions.HTTPError: 404 Client Error: Not Found for url: "
        "http://metadata.google.internal/computeMetadata/v1/instance/attributes/foo",
        # tpu-inference tpu_info.py logs it at ERROR
        "ERROR 08-10 17:53:40 [tpu_info.py:40] Unable to poll TPU GCE Metadata. Got status code: 404 and content: "
        "The requested URL was not found on this server.",
    ],
}


def test_every_rule_has_two_real_wordings_and_a_source() -> None:
    assert set(WORDINGS) == {s.id for s in SIGNATURES}
    for sig in SIGNATURES:
        assert len(WORDINGS[sig.id]) >= 2, sig.id
        assert sig.cause and sig.fix and sig.source and sig.title, sig.id


@pytest.mark.parametrize(
    ("rule", "line"), [(rule, line) for rule, lines in WORDINGS.items() for line in lines]
)
def test_each_wording_is_read_as_its_rule_and_no_other(rule: str, line: str) -> None:
    found = sg.match_line(line)
    assert found and found[0].id == rule, [s.id for s in found]
    # the anchor prefilter holds: the line holds an anchor of the rule that matched it
    assert any(a in line for a in found[0].anchors)
    reading = sg.read_line(line)
    assert reading is not None and reading.rule == rule


def test_numbers_are_read_out() -> None:
    kv = sg.read_line(WORDINGS["kv-cache-too-small"][0])
    assert kv is not None and kv.details["estimated_max_model_len"] == "5632"
    assert "5,632" in kv.fix and "--max-model-len" in kv.fix
    newer = sg.read_line(WORDINGS["kv-cache-too-small"][1])
    assert (
        newer is not None
        and newer.details["needed"] == "9.29 GiB"
        and newer.details["available"] == "9.28 GiB"
    )
    hbm = sg.read_line(WORDINGS["hbm-oom"][1])
    assert hbm is not None and (hbm.details["needed_gib"], hbm.details["available_gib"]) == ("16.23", "15.75")
    assert "0.48 GiB over" in hbm.title
    vmem = sg.read_line(WORDINGS["vmem-oom"][0])
    assert vmem is not None and vmem.details["over_mib"] == "12.58"
    tp = sg.read_line(WORDINGS["tp-sharding-mismatch"][0])
    assert tp is not None and "--tensor-parallel-size 3" in tp.title and "32 attention heads" in tp.cause
    exit_ = sg.read_line(WORDINGS["startup-script-failed"][0])
    assert exit_ is not None and "docker run itself failed" in exit_.cause


def test_hbm_fix_names_quantization_only_when_the_log_shows_one() -> None:
    line = WORDINGS["hbm-oom"][1]
    unknown = sg.read_line(line, sg.Context())
    plain = sg.read_line(line, sg.context_from_args({"model": "google/gemma-4-E2B-it"}))
    qwix = sg.read_line(
        line,
        sg.context_from_args(
            {"additional_config": {"quantization": {"qwix": {"rules": [{"weight_qtype": "int8"}]}}}}
        ),
    )
    assert unknown is not None and plain is not None and qwix is not None
    assert "quantiz" not in unknown.fix and "quantiz" not in plain.fix
    assert "quantization config" in qwix.fix and "int8" in qwix.cause
    assert "16.23 GiB" in plain.cause and "15.75 GiB available" in plain.cause


def test_smem_fix_lowers_max_model_len() -> None:
    r = sg.read_line(
        WORDINGS["smem-oom"][0], sg.context_from_args({"max_model_len": 16384, "block_size": 16})
    )
    assert r is not None and "lower --max-model-len (now 16,384" in r.fix and "8318" in r.fix
    assert "drop --block-size 16" in r.fix


def test_harmless_lines_are_not_failures() -> None:
    assert [s.id for s in sg.match_line(WORDINGS["block-size-scaled"][0])] == [
        "block-size-scaled"
    ]  # not smem
    assert [s.id for s in sg.match_line(WORDINGS["metadata-404"][0])] == ["metadata-404"]
    assert sg.match_line("INFO 08-10 18:04:30 [launcher.py:46] Route: /v1/completions, Methods: POST") == []
    # vLLM's own request preemption is not a TPU VM preemption
    line = "WARNING 08-10 18:04:30 [scheduler.py:1] Sequence group 7 is preempted by PreemptionMode.RECOMPUTE"
    assert "tpu-preempted" not in [s.id for s in sg.match_line(line)]


def test_hf_errors_have_different_fixes_and_429_is_not_a_missing_repo() -> None:
    fixes = {
        rule: sg.read_line(WORDINGS[rule][0]).fix
        for rule in (
            "hf-gated-repo", "hf-gated-unauthenticated", "hf-gated-access", "hf-repo-not-found", "hf-unauthorized",
            "hf-rate-limited",
        )
    }  # fmt: skip
    assert len(set(fixes.values())) == 6
    assert "license" in fixes["hf-gated-repo"] and "wait" in fixes["hf-rate-limited"]


@pytest.mark.parametrize(
    ("line", "level", "proc", "body"),
    [
        (
            "(EngineCore_DP0 pid=283) ERROR 10-10 01:49:55 [core.py:718] EngineCore failed to start.",
            "ERROR",
            "EngineCore_DP0",
            "EngineCore failed to start.",
        ),
        ("ERROR 07-17 10:21:33 core.py:586] boom", "ERROR", None, "boom"),
        ("E0807 12:34:56.789012   1234 tpu_client.cc:99] boom", "ERROR", None, "boom"),
        ("WARNING:root:libtpu.so and TPU device found.", "WARNING", None, "libtpu.so and TPU device found."),
        ("(EngineCore pid=187)     super().__init__(", None, "EngineCore", "    super().__init__("),
        (
            "startup-script: docker: Error response from daemon",
            None,
            None,
            "docker: Error response from daemon",
        ),
    ],
)
def test_split_line_reads_each_logger_prefix(
    line: str, level: str | None, proc: str | None, body: str
) -> None:
    parts = sg.split_line(line)
    assert (parts.level, parts.proc, parts.body) == (level, proc, body)


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("(EngineCore pid=1) ERROR 01-01 00:00:00 [x.py:1] Traceback (most recent call last):", "traceback"),
        ('  File "/workspace/vllm/vllm/v1/engine/core.py", line 1, in run', "furniture"),
        ("AttributeError: 'NoneType' object has no attribute 'startswith'", "exception"),
        ("ERROR 01-01 00:00:00 [x.py:1] something went sideways", "error"),
        ("startup-script: docker: Error response from daemon: unknown", "failure_words"),
        ("INFO 01-01 00:00:00 [x.py:1] retry failed, trying again", None),  # vLLM's INFO is deliberate
        ("UserWarning: this is only a warning", None),
    ],
)
def test_fallback_classes(line: str, kind: str | None) -> None:
    assert sg.classify(sg.split_line(line)) == kind


def test_round_three_readings_are_conditioned_on_the_numbers_and_the_arguments() -> None:
    llama = sg.read_line(WORDINGS["llamacpp-context-exceeded"][0])
    assert llama is not None and "1,140-token prompt" in llama.title and "1,024-token context" in llama.title
    assert "--parallel" in llama.fix and "--ctx-size" in llama.fix
    quota = sg.read_line(WORDINGS["k8s-scale-up-quota"][1])
    assert quota is not None and "TPU_LITE_PODSLICE_V5" in quota.title and "us-west4" in quota.title
    assert "compute.googleapis.com" in quota.fix and "not the Cloud TPU API quota" in quota.cause
    plugin = sg.read_line(WORDINGS["k8s-insufficient-tpu"][1])
    assert plugin is not None and "capacity 0" in plugin.title and "device plugin" in plugin.cause
    gemma3 = sg.context_from_args(
        {"model": "google/gemma-3-12b-it", "reasoning_parser": "gemma4", "tool_call_parser": "gemma4"}
    )
    parser = sg.read_line(WORDINGS["parser-tokens-missing"][0], gemma3)
    assert parser is not None and "--reasoning-parser gemma4 and --tool-call-parser gemma4" in parser.fix
    assert "google/gemma-3-12b-it" in parser.fix
    other = sg.read_line(WORDINGS["parser-tokens-missing"][1])
    assert other is not None and "gemma4" not in other.fix and "family" in other.fix
    ctx = sg.context_from_args({"model": "google/gemma-4-E2B-it"})
    ctx.vllm_version = "0.27.1"
    per_layer = sg.read_line(WORDINGS["transformers-per-layer-attribute"][0], ctx)
    assert per_layer is not None and "vLLM 0.27.1" in per_layer.title and "0.28.0" in per_layer.fix
    assert "5.15" in per_layer.fix and "#49797" in per_layer.source
    rocm = sg.read_line(WORDINGS["quantization-unsupported-on-platform"][3])
    assert rocm is not None and "rocm" in rocm.title and "supported_quantization" not in rocm.fix
    tpu = sg.read_line(WORDINGS["quantization-unsupported-on-platform"][1])
    assert tpu is not None and "on TPU" in tpu.title and "compressed-tensors" in tpu.fix
    port = sg.read_line(WORDINGS["port-in-use"][0], sg.context_from_args({"port": 8001}))
    assert port is not None and "port 8001" in port.title and ":8001" in port.fix
    old_type = sg.read_line(WORDINGS["transformers-unknown-model-type"][1])
    assert old_type is not None and ">= 0.19.0" in old_type.fix  # Gemma 4's first vLLM release
