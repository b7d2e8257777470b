package qnndeploy.playtests

// Unit tests of the Play glue (scaffold --play) on the JVM, against the stand-ins of the Android and AI delivery
// APIs. tests/scaffold/test_kotlin.py renders the glue for com.example.qnnplay, prepares the folders, and runs
//   PlayTestsKt SETUP.json
// SETUP.json: {"install_assets", "fast_follow_assets": app assets folders (base module, and for install-time the
// pack's qnndeploy_npu/ too), "pack": the pack's folder for this SoC (its assetsPath), "other_pack": another SoC's,
// "scratch": a folder for app storage, "pack_name", "group": the SM8750 group, "other_group", "sha256": {path: sha},
// and a package whose groups spread over several packs and whose CPU models are in an install-time asset pack:
// "split_assets", "split_install_assets" (its fast-follow and install-time app assets, the CPU pack merged in, the
// latter with each AI pack's folder too), "split_packs": {pack: its SM8750 assetsPath}, "split_files": {SM8750 path:
// its pack}}.
// These files live in tests/kotlin/play/, not tests/kotlin/, because tests/scaffold/test_kotlin.py compiles every
// tests/kotlin/*.kt against the glue without --play.

import android.content.Context
import android.os.Build
import android.util.Log
import com.example.qnnplay.qnndeploy.Delivery
import com.example.qnnplay.qnndeploy.FileFormat
import com.example.qnnplay.qnndeploy.MiniJson
import com.example.qnnplay.qnndeploy.NativeHost
import com.example.qnnplay.qnndeploy.NpuSource
import com.example.qnnplay.qnndeploy.PackListener
import com.example.qnnplay.qnndeploy.PackProgress
import com.example.qnnplay.qnndeploy.PlayPack
import com.example.qnnplay.qnndeploy.PlayPlan
import com.example.qnnplay.qnndeploy.Provider
import com.example.qnnplay.qnndeploy.QnnRuntime
import com.example.qnnplay.qnndeploy.Reasons
import com.example.qnnplay.qnndeploy.Selection
import com.example.qnnplay.qnndeploy.play
import com.google.android.gms.tasks.Task
import com.google.android.gms.tasks.Tasks
import com.google.android.play.core.aipacks.AiPackLocation
import com.google.android.play.core.aipacks.AiPackManager
import com.google.android.play.core.aipacks.AiPackManagerFactory
import com.google.android.play.core.aipacks.AiPackState
import com.google.android.play.core.aipacks.AiPackStateUpdateListener
import com.google.android.play.core.aipacks.AiPackStates
import com.google.android.play.core.aipacks.model.AiPackStatus
import java.io.File
import qnndeploy.testsupport.FakeContext
import qnndeploy.testsupport.runTests
import java.security.MessageDigest
import kotlin.test.assertContains
import kotlin.test.assertEquals
import kotlin.test.assertFailsWith
import kotlin.test.assertFalse
import kotlin.test.assertNotSame
import kotlin.test.assertSame
import kotlin.test.assertTrue

const val LIB_DIR = "/data/app/~~x/com.example.qnnplay-1/lib/arm64"

/** A process whose QNN libraries all load. */
internal class LoadingHost : NativeHost {
    private val env = HashMap<String, String>()

    override fun getenv(name: String): String? = env[name]

    override fun setenv(name: String, value: String) {
        env[name] = value
    }

    override fun loadLibrary(fileName: String) {}
}

/** Play as a test plays it: where the packs are (locations, else location), what fetch did, the updates it sends. */
class FakeManager(var location: AiPackLocation? = null, var fetchError: Exception? = null) : AiPackManager {
    val fetched = ArrayList<List<String>>()
    val listeners = ArrayList<AiPackStateUpdateListener>()
    val locations = HashMap<String, AiPackLocation>()

    override fun fetch(packNames: List<String>): Task<AiPackStates> {
        fetched.add(packNames.toList())
        return fetchError?.let { Tasks.forException(it) } ?: Tasks.forResult(null)
    }

    override fun getPackLocation(packName: String): AiPackLocation? = locations[packName] ?: location

    override fun registerListener(listener: AiPackStateUpdateListener) {
        listeners.add(listener)
    }

    fun send(name: String, status: Int, downloaded: Long = 0, total: Long = 0) {
        val state = object : AiPackState() {
            override fun bytesDownloaded(): Long = downloaded
            override fun errorCode(): Int = 0
            override fun name(): String = name
            override fun status(): Int = status
            override fun totalBytesToDownload(): Long = total
            override fun transferProgressPercentage(): Int = 0
        }
        listeners.forEach { it.onStateUpdate(state) }
    }
}

/** A pack extracted into a folder, as fast-follow and on-demand packs are. */
fun folder(assets: File): AiPackLocation = object : AiPackLocation() {
    override fun assetsPath(): String = assets.path
    override fun packStorageMethod(): Int = 0
    override fun path(): String = assets.parent
}

fun sha256(file: File): String =
    MessageDigest.getInstance("SHA-256").digest(file.readBytes()).joinToString("") { "%02x".format(it) }

/** Every file under root, relative. */
fun tree(root: File): Set<String> =
    root.walk().filter { it.isFile }.map { it.relativeTo(root).invariantSeparatorsPath }.toSet()

internal class Suite(setup: Map<*, *>) {
    private val installAssets = File(setup["install_assets"] as String)
    private val fastFollowAssets = File(setup["fast_follow_assets"] as String)
    private val pack = File(setup["pack"] as String)
    private val otherPack = File(setup["other_pack"] as String)
    private val scratch = File(setup["scratch"] as String)
    private val packName = setup["pack_name"] as String
    private val group = setup["group"] as String
    private val otherGroup = setup["other_group"] as String
    private val sha = (setup["sha256"] as Map<*, *>).entries.associate { (k, v) -> k as String to v as String }
    private val npuDet = "npu/SM8750/det_ctx.onnx"
    private val splitAssets = File(setup["split_assets"] as String)
    private val splitInstallAssets = File(setup["split_install_assets"] as String)
    private val splitPacks = (setup["split_packs"] as Map<*, *>).entries.associate { (k, v) -> k as String to File(v as String) }
    private val splitFiles = (setup["split_files"] as Map<*, *>).entries.associate { (k, v) -> k as String to v as String }

    /** The split plan's assets folder of a pack. */
    private fun splitFolder(pack: String): String {
        val plan = PlayPlan.parse(File(splitAssets, "qnndeploy/play.json").readText())
        return plan.packs.first { it.name == pack }.folder
    }

    /** A new process on an SM8750 phone (Android 15, QTI), with this Play. */
    private fun start(name: String, assets: File, manager: AiPackManager?): FakeContext {
        QnnRuntime.forget()
        PlayPack.forget()
        QnnRuntime.host = LoadingHost()
        Log.LINES.clear()
        Build.SOC_MANUFACTURER = "QTI"
        Build.SOC_MODEL = "SM8750"
        Build.VERSION.SDK_INT = 35
        AiPackManagerFactory.MANAGER = manager
        return FakeContext(assets, File(scratch, name).apply { deleteRecursively() }, LIB_DIR, "com.example.qnnplay")
    }

    private fun select(context: Context): Selection = QnnRuntime.select(context, FileFormat.ORT_EPCONTEXT)

    /** The "play" object of the last decision line logged. */
    private fun loggedPlay(): Map<*, *> {
        val line = Log.LINES.last { it.startsWith("qnndeploy: decision ") }
        return (MiniJson.parse(line.removePrefix("qnndeploy: decision ")) as Map<*, *>)["play"] as Map<*, *>
    }

    fun tests(): List<Pair<String, () -> Unit>> = listOf(
        "install-time: the NPU files are copied from the pack's assets, and Play's API is not used" to {
            val context = start("install", installAssets, manager = null) // getInstance would throw
            val s = select(context)
            assertEquals(Provider.NPU to "npu", s.decision.provider to s.decision.reasonKey, s.decision.reason)
            val det = File(context.filesDir, "qnndeploy/$npuDet")
            assertEquals(det.absolutePath, s.path("det"))
            assertEquals(sha.getValue(npuDet), sha256(det), "copied whole")
            assertContains(context.opened, "qnndeploy_npu/$npuDet")
            assertContains(context.opened, "qnndeploy_npu/group.json")
            assertFalse(context.opened.any { it.startsWith("qnndeploy/npu/") }, "no NPU file in the base assets")
            assertEquals(group, s.play?.deliveredGroup)
            assertEquals(group, s.play?.expectedGroup)
        },
        "fast-follow, pack not there yet: the CPU, reason pack_not_ready, and the pack is fetched" to {
            val manager = FakeManager()
            val context = start("absent", fastFollowAssets, manager)
            val s = select(context)
            assertEquals(Provider.CPU to "pack_not_ready", s.decision.provider to s.decision.reasonKey)
            assertEquals(
                Reasons.packNotReady(pack = packName, delivery = "fast-follow", detail = "not downloaded yet").text,
                s.decision.reason,
            )
            assertEquals(listOf(listOf(packName)), manager.fetched)
            assertEquals(1, manager.listeners.size)
            assertEquals(File(context.filesDir, "qnndeploy/cpu/det.onnx").absolutePath, s.path("det"))
            assertEquals(null, s.play?.deliveredGroup)
            assertEquals(group, s.play?.expectedGroup)
        },
        "download progress reaches the app; COMPLETED makes the next select use the pack's files where they are" to {
            val manager = FakeManager()
            val context = start("arrives", fastFollowAssets, manager)
            val heard = ArrayList<PackProgress>()
            PlayPack.addListener { heard.add(it) }
            val cpu = select(context)
            assertEquals("pack_not_ready", cpu.decision.reasonKey)
            manager.send(packName, AiPackStatus.DOWNLOADING, downloaded = 50, total = 200)
            manager.send("another_pack", AiPackStatus.COMPLETED)
            assertSame(cpu, select(context), "decided once per process until the pack arrives")
            manager.send(packName, AiPackStatus.WAITING_FOR_WIFI, downloaded = 50, total = 200)
            manager.location = folder(pack)
            manager.send(packName, AiPackStatus.COMPLETED, downloaded = 200, total = 200)
            assertEquals(listOf(25, 25, 100), heard.map { it.percent })
            assertEquals(listOf(false, true, false), heard.map { it.needsUser })
            assertTrue(heard.last().completed)
            val npu = select(context)
            assertNotSame(cpu, npu)
            assertEquals(Provider.CPU, cpu.decision.provider, "a selection in use stays as it was")
            assertEquals(Provider.NPU to "npu", npu.decision.provider to npu.decision.reasonKey, npu.decision.reason)
            assertEquals(File(pack, "qnndeploy_npu/$npuDet").absolutePath, npu.path("det"))
            assertTrue(npu.path("rec").startsWith(pack.absolutePath), npu.path("rec"))
            assertFalse(tree(context.filesDir).any { "npu/" in it }, "no second copy: ${tree(context.filesDir)}")
            assertFalse(context.opened.any { it.startsWith("qnndeploy_npu/") })
            assertEquals(1, manager.fetched.size, "fetched once, while the pack was missing")
            assertSame(npu, select(context))
        },
        "a pack of another SoC's group: the CPU, reason pack_group_mismatch" to {
            val manager = FakeManager(location = folder(otherPack))
            val s = select(start("mismatch", fastFollowAssets, manager))
            assertEquals(Provider.CPU to "pack_group_mismatch", s.decision.provider to s.decision.reasonKey)
            val want = Reasons.packGroupMismatch(delivered = otherGroup, pack = packName, soc = "SM8750", expected = group)
            assertEquals(want.text, s.decision.reason)
            assertEquals(otherGroup to group, s.play?.deliveredGroup to s.play?.expectedGroup)
            assertEquals(emptyList(), manager.fetched, "a pack is there: nothing to fetch")
        },
        "a phone without a target compiles the base module's ONNX on the device: no pack is waited for" to {
            // the bundle with on_device (format 4): an SM8845 (v81) has no target and no group, and the pack is not
            // on the phone; the on-device path needs only the base module's CPU models
            val assets = File(scratch, "on-device-assets").apply { deleteRecursively() }
            fastFollowAssets.copyRecursively(assets)
            val manifest = File(assets, "qnndeploy/manifest.json")
            val graphs = listOf("det", "rec").map {
                mapOf("graph" to it, "path" to "cpu/$it.onnx", "ep_options" to emptyMap<String, String>(), "validated" to listOf("v81"))
            }
            val onDevice = mapOf("budget_s" to 60L, "graphs" to graphs, "artifacts" to emptyList<Any>())
            manifest.writeText(MiniJson.write(MiniJson.parse(manifest.readText()) as Map<*, *> + mapOf("format_version" to 4L, "on_device" to onDevice)))
            val manager = FakeManager()
            val context = start("on-device", assets, manager)
            Build.SOC_MODEL = "SM8845"
            val s = select(context)
            assertEquals(Provider.NPU to "npu_on_device", s.decision.provider to s.decision.reasonKey, s.decision.reason)
            assertEquals(NpuSource.ON_DEVICE, s.decision.npuSource)
            assertEquals(File(context.filesDir, "qnndeploy/cpu/det.onnx").absolutePath, s.path("det"))
            assertFalse(context.opened.any { it.startsWith("qnndeploy_npu/") }, "nothing read from a pack")
            assertEquals(emptyList(), manager.fetched)
        },
        "a pack file whose size is not the plan's: the CPU, reason pack_not_ready naming it" to {
            val damaged = File(scratch, "damaged-pack").apply { deleteRecursively() }
            pack.copyRecursively(damaged)
            File(damaged, "qnndeploy_npu/$npuDet").appendBytes(byteArrayOf(0))
            val s = select(start("damaged", fastFollowAssets, FakeManager(location = folder(damaged))))
            assertEquals("pack_not_ready", s.decision.reasonKey)
            assertContains(s.decision.reason, npuDet)
        },
        "the decision's log line has the play object, the group Play's rule gives this phone among it" to {
            val context = start("log", fastFollowAssets, FakeManager(location = folder(pack)))
            select(context)
            assertEquals(
                mapOf(
                    "pack" to packName, "delivery" to "fast-follow", "delivered_group" to group,
                    "expected_group" to group, "play_group" to group,
                ),
                loggedPlay(),
            )
            val line = Log.LINES.last { it.startsWith("qnndeploy: decision ") }
            val keys = (MiniJson.parse(line.removePrefix("qnndeploy: decision ")) as Map<*, *>).keys.toList()
            assertEquals(listOf("provider", "soc", "identified_by", "reason", "reason_key"), keys.take(5))
            assertEquals("play", keys.last())
            // Play compares exactly, the selector does not: lower case reaches the same target, not the same group
            val lower = start("log-lower", fastFollowAssets, FakeManager(location = folder(pack)))
            Build.SOC_MODEL = "sm8750"
            assertEquals(Provider.NPU, select(lower).decision.provider)
            assertEquals("other" to group, loggedPlay()["play_group"] to loggedPlay()["expected_group"])
        },
        "an NPU init failure's CPU fallback logs the play object too" to {
            val s = select(start("init", fastFollowAssets, FakeManager(location = folder(pack))))
            val cpu = s.toCpu(Reasons.npuInitFailed(error = "QNN error 1008"))
            assertEquals("npu_init_failed", cpu.decision.reasonKey)
            assertEquals(group, loggedPlay()["delivered_group"])
            assertEquals(cpu.play, s.play)
        },
        "a failed fetch request is told to the app" to {
            val manager = FakeManager(fetchError = IllegalStateException("the app was not installed by Play"))
            val context = start("fetch-fails", fastFollowAssets, manager)
            val failures = ArrayList<String>()
            PlayPack.addListener(object : PackListener {
                override fun onPackUpdate(progress: PackProgress) {}
                override fun onFetchFailed(error: Exception) {
                    failures.add(error.message.orEmpty())
                }
            })
            assertEquals("pack_not_ready", select(context).decision.reasonKey)
            assertEquals(listOf("the app was not installed by Play"), failures)
        },
        "a group spread over packs: the CPU until every pack with its files is there, then each file where its pack is" to {
            val names = splitPacks.keys.toList()
            val (first, last) = names.first() to names.last()
            assertTrue(names.size > 1 && splitFiles.values.toSet() == names.toSet(), "$names $splitFiles")
            val manager = FakeManager()
            manager.locations[first] = folder(splitPacks.getValue(first))
            val context = start("split", splitAssets, manager)
            val cpu = select(context)
            assertEquals(Provider.CPU to "pack_not_ready", cpu.decision.provider to cpu.decision.reasonKey)
            val second = names[1]
            assertEquals(
                Reasons.packNotReady(pack = second, delivery = "fast-follow", detail = "not downloaded yet").text,
                cpu.decision.reason,
            )
            assertEquals(listOf(names), manager.fetched, "every pack asked for")
            assertContains(context.opened, "qnndeploy/cpu/det.onnx") // from the CPU pack, merged into the assets
            assertEquals(File(context.filesDir, "qnndeploy/cpu/det.onnx").absolutePath, cpu.path("det"))
            assertEquals(group, cpu.play?.deliveredGroup, "the first pack's group")
            names.drop(1).forEach { manager.locations[it] = folder(splitPacks.getValue(it)) }
            manager.send(last, AiPackStatus.COMPLETED)
            val npu = select(context)
            assertEquals(Provider.NPU to "npu", npu.decision.provider to npu.decision.reasonKey, npu.decision.reason)
            for ((path, pack) in splitFiles) {
                val file = File(splitPacks.getValue(pack), "${splitFolder(pack)}/$path")
                assertEquals(sha.getValue(path), sha256(file))
                assertTrue(npu.decision.files.contains(path), path)
                assertEquals(file.absolutePath, npu.pack!!.files.getValue(path).absolutePath)
            }
            assertFalse(tree(context.filesDir).any { "npu/" in it }, "no second copy: ${tree(context.filesDir)}")
            // a later pack of another group: pack_group_mismatch names it
            val other = File(scratch, "split-other").apply { deleteRecursively() }
            File(other, splitFolder(last)).mkdirs()
            File(other, "${splitFolder(last)}/group.json").writeText("{\"group\": \"$otherGroup\"}")
            manager.locations[last] = folder(other)
            val mismatch = select(start("split-mismatch", splitAssets, manager))
            val want = Reasons.packGroupMismatch(delivered = otherGroup, pack = last, soc = "SM8750", expected = group)
            assertEquals(want.text, mismatch.decision.reason)
        },
        "install-time packs: each NPU file is copied from its own pack's folder of the assets" to {
            val context = start("split-install", splitInstallAssets, manager = null)
            val s = select(context)
            assertEquals(Provider.NPU to "npu", s.decision.provider to s.decision.reasonKey, s.decision.reason)
            for ((path, pack) in splitFiles) {
                assertContains(context.opened, "${splitFolder(pack)}/$path")
                assertContains(context.opened, "${splitFolder(pack)}/group.json")
                assertEquals(sha.getValue(path), sha256(File(context.filesDir, "qnndeploy/$path")), "copied whole")
            }
        },
        "PlayPlan reads play.json and refuses what is not a plan" to {
            val plan = PlayPlan.parse(File(fastFollowAssets, "qnndeploy/play.json").readText())
            assertEquals(packName to Delivery.FAST_FOLLOW, plan.pack to plan.delivery)
            assertTrue(plan.groups.any { it.name == group && "SM8750" in it.socs })
            assertEquals("other", plan.defaultGroup)
            assertFailsWith<IllegalArgumentException> { PlayPlan.parse("{}") }
            assertFailsWith<IllegalArgumentException> { PlayPlan.parse("[1]") }
            val text = File(installAssets, "qnndeploy/play.json").readText()
            assertEquals(Delivery.INSTALL_TIME, PlayPlan.parse(text).delivery)
            assertFailsWith<IllegalArgumentException> { PlayPlan.parse(text.replace("install-time", "sometime")) }
        },
    )
}

fun main(args: Array<String>) {
    val suite = Suite(MiniJson.parse(File(args[0]).readText()) as Map<*, *>)
    runTests(suite.tests())
}
