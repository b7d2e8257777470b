/* A QNN backend library that forwards to the real HTP backend (libQnnHtp.so) and turns on its host-side
 * performance model, Hextimate, in every graph it creates.
 *
 * Why: the HTP backend estimates a graph's cycles at finalize when the graph carries the HTP custom config
 * QNN_HTP_GRAPH_CONFIG_OPTION_FINALIZE_CONFIG with key "hextimate" = 1, and writes them as a "Performance Estimates"
 * profiling event. ONNX Runtime's QNN execution provider has no option that passes that config, but it takes any
 * backend library as `backend_path`. This library is that backend: it loads the real libQnnHtp.so, hands out its
 * interface table unchanged except for graphCreate, and graphCreate appends the finalize config to the caller's
 * configs. Nothing else is changed or called.
 *
 * Built by qnndeploy/qnn/hextimate.py with the machine's C compiler (cc -shared -fPIC ... -ldl); written for
 * qnndeploy from the public facts cited below. Only the few types it needs are declared here, not the QNN headers.
 *
 * Sources of the facts (QNN SDK headers as vendored in public repositories):
 *  [I] QnnInterface.h, QNN API 2.32 (QAIRT v2.43.0), github.com/chuzcjoe/qnnx, external/QNN/include/QnnInterface.h
 *      at 844820579ee06d25091df5fbf5b0cf83a252271d: QnnInterface_t is {uint32_t backendId; const char* providerName;
 *      Qnn_ApiVersion_t apiVersion; union {QNN_INTERFACE_VER_TYPE ...}}; the function table starts with
 *      propertyHasCapability, backendCreate, backendSetConfig, backendGetApiVersion, backendGetBuildId,
 *      backendRegisterOpPackage, backendGetSupportedOperations, backendValidateOpConfig, backendFree,
 *      contextCreate, contextSetConfig, contextGetBinarySize, contextGetBinary, contextCreateFromBinary, contextFree,
 *      graphCreate: graphCreate is pointer 15, backendGetApiVersion pointer 3. QnnInterface_getProviders(const
 *      QnnInterface_t*** providerList, uint32_t* numProviders). QnnGraph_CreateFn_t is (Qnn_ContextHandle_t, const
 *      char* graphName, const QnnGraph_Config_t** config, Qnn_GraphHandle_t* graphHandle) -> Qnn_ErrorHandle_t.
 *      (Older headers, e.g. QNN API 2.15 in github.com/peyer/qcom_qnn include/QNN/QnnInterface.h, have no
 *      backendSetConfig and put graphCreate at 14: the layout check below refuses such a table.)
 *  [C] QnnCommon.h / QnnTypes.h, same repository and commit: Qnn_ErrorHandle_t is uint64_t, QNN_SUCCESS 0;
 *      Qnn_Version_t {uint32_t major, minor, patch}; Qnn_ApiVersion_t {Qnn_Version_t coreApiVersion,
 *      backendApiVersion}; Qnn_Scalar_t {Qnn_DataType_t dataType; union {float; double; uint64_t; int64_t;
 *      uint32_t; ...; const char*}}; QNN_DATATYPE_UINT_32 = 0x0132.
 *  [G] QnnGraph.h, same: QnnGraph_Config_t {QnnGraph_ConfigOption_t option; union {QnnGraph_CustomConfig_t
 *      customConfig; ...}}, QNN_GRAPH_CONFIG_OPTION_CUSTOM = 0, QnnGraph_CustomConfig_t is void*; the config list
 *      is a NULL-terminated array of pointers.
 *  [H] HTP/QnnHtpGraph.h, same: QnnHtpGraph_CustomConfig_t {QnnHtpGraph_ConfigOption_t option; union {...;
 *      QnnHtpGraph_FinalizeConfig_t finalizeConfig; ...}}, QNN_HTP_GRAPH_CONFIG_OPTION_FINALIZE_CONFIG = 7,
 *      QnnHtpGraph_FinalizeConfig_t {const char* key; Qnn_Scalar_t value}. The same enum value and struct in
 *      github.com/qdsp6sw/qualcomm-ai-engine-direct-sdk include/QNN/HTP/QnnHtpGraph.h (QAIRT v2.25.0), and ONNX
 *      Runtime's QNN EP sets a finalize config the same way (key "enable_matmul_lut", qnn_graph_configs_helper).
 *  [K] The key "hextimate" and the event name: strings in the wheel's libQnnHtp.so ("hextimate", "Failed to set
 *      hextimate for graph %d", "Performance Estimates unsupported on soc %s"); the value 1 and its effect were
 *      measured here (../shared/facts/2026-12-05-runtimes-llms-estimates.md).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint64_t Qnn_ErrorHandle_t;                    /* [C] */
#define QNN_SUCCESS 0                                  /* [C] */
#define QNN_COMMON_ERROR_MEM_ALLOC 1002                /* [C] QNN_MIN_ERROR_COMMON (1000) + 2 */
#define QNN_COMMON_ERROR_INVALID_ARGUMENT 1004         /* [C] + 4 */
#define QNN_COMMON_ERROR_LOADING_BINARIES 1009         /* [C] + 9 */
#define QNN_GRAPH_CONFIG_OPTION_CUSTOM 0               /* [G] */
#define QNN_HTP_GRAPH_CONFIG_OPTION_FINALIZE_CONFIG 7  /* [H] */
#define QNN_DATATYPE_UINT_32 0x0132                    /* [C] */

typedef struct { uint32_t major, minor, patch; } Qnn_Version_t;                     /* [C] */
typedef struct { Qnn_Version_t coreApiVersion, backendApiVersion; } Qnn_ApiVersion_t; /* [C] */

typedef struct {  /* [C] Qnn_Scalar_t: a 32-bit type tag, then a union whose widest members are 8 bytes */
  int32_t dataType;
  union { uint32_t uint32Value; uint64_t uint64Value; double doubleValue; const char* stringValue; };
} Qnn_Scalar_t;

typedef struct { const char* key; Qnn_Scalar_t value; } QnnHtpGraph_FinalizeConfig_t;  /* [H] */

typedef struct {  /* [H] QnnHtpGraph_CustomConfig_t: only the member used here; padded to cover the others */
  int32_t option;
  union { QnnHtpGraph_FinalizeConfig_t finalizeConfig; uint8_t reserved[64]; };
} QnnHtpGraph_CustomConfig_t;

typedef struct {  /* [G] QnnGraph_Config_t: option, then a union whose first member is a void* */
  int32_t option;
  union { void* customConfig; uint8_t reserved[8]; };
} QnnGraph_Config_t;

typedef Qnn_ErrorHandle_t (*GraphCreateFn)(void* context, const char* name, const QnnGraph_Config_t** config,
                                           void** graph);                              /* [I] */
typedef Qnn_ErrorHandle_t (*GetApiVersionFn)(Qnn_ApiVersion_t* version);               /* [I] */
typedef Qnn_ErrorHandle_t (*GetProvidersFn)(const void*** providers, uint32_t* count); /* [I] */

/* [I] QnnInterface_t: backendId, providerName, apiVersion, then the function table. */
typedef struct {
  uint32_t backendId;
  const char* providerName;
  Qnn_ApiVersion_t apiVersion;
} InterfaceHead;
#define TABLE_OFFSET ((sizeof(InterfaceHead) + sizeof(void*) - 1) / sizeof(void*) * sizeof(void*))
#define SLOT_GET_API_VERSION 3  /* [I] */
#define SLOT_GRAPH_CREATE 15    /* [I] */
#define MAX_PROVIDERS 8
#define MAX_COPY 4096  /* bytes of one provider copied: its table (about 60 pointers today) and room to grow */

static pthread_once_t once = PTHREAD_ONCE_INIT;
static Qnn_ErrorHandle_t load_error = QNN_SUCCESS;
static uint8_t copies[MAX_PROVIDERS][MAX_COPY] __attribute__((aligned(16)));
static const void* handed_out[MAX_PROVIDERS];
static uint32_t provider_count;
static GraphCreateFn real_graph_create[MAX_PROVIDERS];

static void say(const char* what, const char* detail) {
  fprintf(stderr, "qnndeploy-hextimate: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
}

/* The folder of the loaded library whose file name is `want` (onnxruntime-qnn's EP library), into `out`. */
struct Find { const char* want; char* out; size_t size; };
static int find_loaded(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  struct Find* f = data;
  const char* slash = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
  if (!slash || strcmp(slash + 1, f->want) != 0) return 0;
  size_t n = (size_t)(slash - info->dlpi_name);
  if (n + 1 > f->size) return 0;
  memcpy(f->out, info->dlpi_name, n);
  f->out[n] = '\0';
  return 1;
}

/* How many bytes from `at` stay inside the mapping that holds it, read from /proc/self/maps (0 when none does).
 * The backend builds its interface table at run time, on the heap, so its size is not known here: the copy takes
 * up to MAX_COPY bytes, never past the mapping's end. */
static size_t mapped_after(uintptr_t at) {
  FILE* maps = fopen("/proc/self/maps", "r");
  if (!maps) return 0;
  char line[512];
  size_t left = 0;
  while (fgets(line, sizeof line, maps)) {
    unsigned long start = 0, end = 0;
    if (sscanf(line, "%lx-%lx", &start, &end) == 2 && at >= start && at < end) {
      left = end - at;
      break;
    }
  }
  fclose(maps);
  return left;
}

/* The config added to every graph: set once here, read-only after, so concurrent graphCreate calls share it. */
static QnnHtpGraph_CustomConfig_t hextimate_htp = {
    .option = QNN_HTP_GRAPH_CONFIG_OPTION_FINALIZE_CONFIG,
    .finalizeConfig = {.key = "hextimate", .value = {.dataType = QNN_DATATYPE_UINT_32, .uint32Value = 1}}};
static const QnnGraph_Config_t hextimate_graph = {.option = QNN_GRAPH_CONFIG_OPTION_CUSTOM,
                                                  .customConfig = &hextimate_htp};

/* graphCreate with the caller's configs plus the hextimate one. One wrapper per provider slot. */
static Qnn_ErrorHandle_t create_with(int slot, void* context, const char* name, const QnnGraph_Config_t** config,
                                     void** graph) {
  size_t n = 0;
  while (config && config[n]) n++;
  const QnnGraph_Config_t** with = calloc(n + 2, sizeof(*with));
  if (!with) return QNN_COMMON_ERROR_MEM_ALLOC;
  for (size_t i = 0; i < n; i++) with[i] = config[i];
  with[n] = &hextimate_graph;
  /* `with` is not freed: the API does not say the backend is done with the list when graphCreate returns, and it
   * is a few pointers per graph in a process that compiles and ends. */
  return real_graph_create[slot](context, name, with, graph);
}
#define WRAP(i) \
  static Qnn_ErrorHandle_t create_##i(void* c, const char* n, const QnnGraph_Config_t** k, void** g) { \
    return create_with(i, c, n, k, g); }
WRAP(0) WRAP(1) WRAP(2) WRAP(3) WRAP(4) WRAP(5) WRAP(6) WRAP(7)
static const GraphCreateFn wrappers[MAX_PROVIDERS] = {create_0, create_1, create_2, create_3,
                                                      create_4, create_5, create_6, create_7};

static void load(void) {
  char path[4096];
  const char* env = getenv("QNNDEPLOY_HEXTIMATE_BACKEND");
  if (env && *env) {
    snprintf(path, sizeof path, "%s", env);
  } else {  /* beside onnxruntime-qnn's EP library, where its wheel keeps libQnnHtp.so */
    char dir[4000];
    struct Find f = {"libonnxruntime_providers_qnn.so", dir, sizeof dir};
    if (!dl_iterate_phdr(find_loaded, &f)) {
      say("the real libQnnHtp.so is not found", "set QNNDEPLOY_HEXTIMATE_BACKEND to its path");
      load_error = QNN_COMMON_ERROR_LOADING_BINARIES;
      return;
    }
    snprintf(path, sizeof path, "%s/libQnnHtp.so", dir);
  }
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  GetProvidersFn get = lib ? (GetProvidersFn)dlsym(lib, "QnnInterface_getProviders") : NULL;
  if (!get) {
    say("cannot load the real HTP backend", dlerror());
    load_error = QNN_COMMON_ERROR_LOADING_BINARIES;
    return;
  }
  const void** real = NULL;
  uint32_t count = 0;
  load_error = get(&real, &count);
  if (load_error != QNN_SUCCESS) return;
  if (count > MAX_PROVIDERS) count = MAX_PROVIDERS;
  for (uint32_t i = 0; i < count; i++) {
    const InterfaceHead* head = real[i];
    size_t left = mapped_after((uintptr_t)real[i]);
    size_t take = left < MAX_COPY ? left : MAX_COPY;
    if (take < TABLE_OFFSET + (SLOT_GRAPH_CREATE + 1) * sizeof(void*)) {
      say("the backend's interface table is not where expected", NULL);
      load_error = QNN_COMMON_ERROR_LOADING_BINARIES;
      return;
    }
    memcpy(copies[i], real[i], take);
    void** table = (void**)(copies[i] + TABLE_OFFSET);
    /* Layout check: pointer 3 must be backendGetApiVersion, answering the version the provider states. With an
     * older table (no backendSetConfig) pointer 3 is backendGetBuildId, which writes a pointer, not this. */
    Qnn_ApiVersion_t said;
    memset(&said, 0, sizeof said);
    GetApiVersionFn version = (GetApiVersionFn)table[SLOT_GET_API_VERSION];
    if (head->apiVersion.coreApiVersion.major != 2 || !version || version(&said) != QNN_SUCCESS ||
        memcmp(&said.coreApiVersion, &head->apiVersion.coreApiVersion, sizeof(Qnn_Version_t)) != 0) {
      say("the backend's interface table has another layout than QNN API 2.x with backendSetConfig", NULL);
      load_error = QNN_COMMON_ERROR_LOADING_BINARIES;
      return;
    }
    real_graph_create[i] = (GraphCreateFn)table[SLOT_GRAPH_CREATE];
    table[SLOT_GRAPH_CREATE] = (void*)wrappers[i];
    handed_out[i] = copies[i];
  }
  provider_count = count;
}

__attribute__((visibility("default")))
Qnn_ErrorHandle_t QnnInterface_getProviders(const void*** providers, uint32_t* count) {
  pthread_once(&once, load);
  if (load_error != QNN_SUCCESS) return load_error;
  if (!providers || !count) return QNN_COMMON_ERROR_INVALID_ARGUMENT;
  *providers = handed_out;
  *count = provider_count;
  return QNN_SUCCESS;
}
