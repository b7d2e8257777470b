package com.example.qnnsample.qnndeploy

import android.content.Context
import android.content.res.AssetManager
import android.os.Build
import android.util.Log
import com.google.android.play.core.aipacks.AiPackManager
import com.google.android.play.core.aipacks.AiPackManagerFactory
import com.google.android.play.core.aipacks.AiPackState
import com.google.android.play.core.aipacks.AiPackStateUpdateListener
import com.google.android.play.core.aipacks.model.AiPackStatus
import java.io.File
import java.io.IOException
import java.io.InputStream
import java.util.concurrent.CopyOnWriteArrayList

// The NPU files of the bundle, delivered by Google Play in AI packs (`qnndeploy package play`): the plan
// (assets/qnndeploy/play.json), the two rules that read it, and the pack as it is on the phone. The rules are the
// twins of qnndeploy/formats/playplan.py (play_group, expected_group); tests/scaffold/test_kotlin.py requires them to agree.
// The base module keeps manifest.json, the CPU models and the QNN libraries: the CPU runs until the pack is there.

/** A system-on-chip selector: Build.SOC_MANUFACTURER and Build.SOC_MODEL as Play compares them (exactly). */
internal data class PlaySoc(val manufacturer: String, val model: String)

/** A bundle file of a device group, at its bundle path, and the AI pack that carries it. */
internal data class PlayFile(val path: String, val size: Long, val sha256: String, val pack: String)

/**
 * An AI pack of the plan and its assets folder (folder/ on the phone). A plan has more than one when a group's files
 * pass Play's limit for one pack; each has its own folder, so install-time packs never hold one asset path twice.
 */
internal data class PlanPack(val name: String, val folder: String)

/**
 * A device group of the pack: the catalog SoCs whose bundle targets it holds, its one device selector (any of its
 * SoCs selects a phone; an empty one selects every phone, as in Play), and its files.
 */
internal data class PlayGroup(
    val name: String,
    val socs: List<String> = emptyList(),
    val selectors: List<PlaySoc> = emptyList(),
    val files: List<PlayFile> = emptyList(),
)

/** How Play delivers the pack; id is its "delivery" in play.json. */
internal enum class Delivery(val id: String) {
    INSTALL_TIME("install-time"),
    FAST_FOLLOW("fast-follow"),
    ON_DEMAND("on-demand"),
}

/** play.json, the parts the app reads (qnndeploy/schemas/play.schema.json), in the config's group order. */
internal data class PlayPlan(
    val packs: List<PlanPack>,
    val delivery: Delivery,
    val defaultGroup: String = PlayRules.DEFAULT_GROUP,
    val groups: List<PlayGroup> = emptyList(),
) {
    /** The first pack's name, the one package play was given (--pack). */
    val pack: String get() = packs.first().name

    companion object {
        const val FORMAT = Generated.PLAY_FORMAT

        /** Throws IllegalArgumentException, saying what is wrong, for text that is not a Play plan. */
        fun parse(text: String): PlayPlan = from(MiniJson.parse(text))

        fun from(json: Any?): PlayPlan {
            val top = json as? Map<*, *> ?: throw IllegalArgumentException("play.json is not a JSON object")
            require(top["format"] == FORMAT) { "play.json's format is ${MiniJson.write(top["format"])}, not \"$FORMAT\"" }
            val delivery = Delivery.values().firstOrNull { it.id == top["delivery"] }
                ?: throw IllegalArgumentException("play.json's delivery ${MiniJson.write(top["delivery"])} is unknown")
            val packs = list(top["packs"], "packs").map {
                val p = it as? Map<*, *> ?: throw IllegalArgumentException("a pack of play.json is not an object")
                PlanPack(text(p["name"], "a pack's name"), text(p["folder"], "a pack's folder"))
            }
            require(packs.isNotEmpty()) { "play.json names no pack" }
            val groups = list(top["groups"], "groups").map { raw ->
                val g = raw as? Map<*, *> ?: throw IllegalArgumentException("a group of play.json is not an object")
                PlayGroup(
                    name = text(g["name"], "a group's name"),
                    socs = list(g["socs"], "socs").map { text(it, "a group's SoC") },
                    selectors = list(g["selectors"], "selectors").map {
                        val s = it as? Map<*, *> ?: throw IllegalArgumentException("a selector is not an object")
                        PlaySoc(text(s["manufacturer"], "a selector's manufacturer"), text(s["model"], "a selector's model"))
                    },
                    files = list(g["files"], "files").map {
                        val f = it as? Map<*, *> ?: throw IllegalArgumentException("a file is not an object")
                        val size = f["size"] as? Long ?: throw IllegalArgumentException("a file's size is not a number")
                        val pack = text(f["pack"], "a file's pack")
                        require(packs.any { p -> p.name == pack }) { "a file's pack $pack is not among play.json's packs" }
                        PlayFile(text(f["path"], "a file's path"), size, text(f["sha256"], "a file's sha256"), pack)
                    },
                )
            }
            return PlayPlan(
                packs = packs,
                delivery = delivery,
                defaultGroup = text(top["default_group"], "default_group"),
                groups = groups,
            )
        }

        private fun text(value: Any?, what: String): String =
            value as? String ?: throw IllegalArgumentException("$what in play.json is not a string")

        private fun list(value: Any?, what: String): List<*> =
            value as? List<*> ?: throw IllegalArgumentException("$what in play.json is not a list")
    }
}

/** The two questions both twins ask of a plan: which group Play gives a phone, and which one its SoC needs. */
internal object PlayRules {
    /** The first pack's assets folder: qnndeploy_npu#group_<g>/ in the module, qnndeploy_npu/ on the phone. */
    const val FOLDER = Generated.PLAY_FOLDER

    /** In every group's folder: which group the phone got, since Play strips the #group_ suffix. */
    const val GROUP_FILE = Generated.PLAY_GROUP_FILE

    /** What Play gives a phone that matches no group. */
    const val DEFAULT_GROUP = Generated.PLAY_DEFAULT_GROUP

    /** Play targets system-on-chip only from Android 12 (API 31) on. */
    const val SOC_TARGETING_SINCE_SDK = Generated.PLAY_SOC_TARGETING_SINCE_SDK

    /**
     * The group Play delivers to a phone reporting these Build.SOC_MANUFACTURER / Build.SOC_MODEL values: the first
     * group, in the config's order, whose selector has the phone's pair, compared exactly (no trimming, no case
     * folding: Play compares them so). Below API 31, or with a value unset, no SoC selector matches.
     */
    fun playGroup(
        groups: List<PlayGroup>,
        manufacturer: String?,
        model: String?,
        sdkInt: Int,
        default: String = DEFAULT_GROUP,
    ): String {
        val known = sdkInt >= SOC_TARGETING_SINCE_SDK && manufacturer != null && model != null
        val phone = PlaySoc(manufacturer.orEmpty(), model.orEmpty())
        return groups.firstOrNull { it.selectors.isEmpty() || (known && phone in it.selectors) }?.name ?: default
    }

    /**
     * The group holding the bundle target of soc (the catalog model, as QnnSelector.identify gives it); the default
     * group when the bundle has no target for it, since such a phone runs on the CPU whatever Play delivers.
     */
    fun expectedGroup(plan: PlayPlan, soc: String?): String =
        plan.groups.firstOrNull { soc != null && soc in it.socs }?.name ?: plan.defaultGroup
}

/** A pack download as the app hears of it. status: an AiPackStatus value. */
data class PackProgress(
    val pack: String,
    val status: Int,
    val bytesDownloaded: Long = 0,
    val totalBytes: Long = 0,
    /** an AiPackErrorCode value when the download failed, else 0 */
    val errorCode: Int = 0,
) {
    val percent: Int get() = if (totalBytes > 0) (bytesDownloaded * 100 / totalBytes).toInt() else 0

    /**
     * Play waits for the user: for Wi-Fi, or for consent to download over mobile data. Only an Activity can ask:
     * AiPackManagerFactory.getInstance(context).showConfirmationDialog(launcher).
     */
    val needsUser: Boolean
        get() = status == AiPackStatus.WAITING_FOR_WIFI || status == AiPackStatus.REQUIRES_USER_CONFIRMATION

    /** The pack is on the phone: the next model open uses the NPU (open models keep running where they are). */
    val completed: Boolean get() = status == AiPackStatus.COMPLETED

    val failed: Boolean get() = status == AiPackStatus.FAILED || status == AiPackStatus.CANCELED
}

/** Told of the pack's download (on the thread Play calls back on, the main thread). */
fun interface PackListener {
    fun onPackUpdate(progress: PackProgress)

    /** The fetch request itself failed (no Play Store, app not installed from Play, ...). */
    fun onFetchFailed(error: Exception) {}
}

/**
 * The pack on this phone now. group: the group Play delivered (from its group.json), null when the pack is not
 * there, and then problem says why. dir: the folder holding the bundle paths (fast-follow, on-demand); null when the
 * files are in the app's assets (install-time, inside an APK).
 */
internal data class PackOnPhone(val group: String?, val dir: File? = null, val problem: String? = null)

/** The decision log's "play" object: what Play delivered and what this SoC needs. */
internal data class PlayReport(
    val pack: String,
    val delivery: String,
    val deliveredGroup: String?,
    val expectedGroup: String,
    /** the group Play's rule gives this phone's Build.SOC_MANUFACTURER / Build.SOC_MODEL */
    val playGroup: String,
) {
    fun toMap(): Map<String, Any?> = linkedMapOf(
        "pack" to pack, "delivery" to delivery, "delivered_group" to deliveredGroup,
        "expected_group" to expectedGroup, "play_group" to playGroup,
    )
}

object PlayPack {
    /** play.json, beside manifest.json in the base module's assets. */
    internal const val PLAN = Generated.PLAY_PLAN

    private val listeners = CopyOnWriteArrayList<PackListener>()
    private val lock = Any()
    private var plan: PlayPlan? = null
    private var registered = false

    /** Tells listener of the pack's download from now on. */
    fun addListener(listener: PackListener) {
        listeners.add(listener)
    }

    fun removeListener(listener: PackListener) {
        listeners.remove(listener)
    }

    /** The plan in the app's assets, read once per process. */
    internal fun plan(context: Context): PlayPlan = synchronized(lock) {
        plan ?: readPlan(context).also { plan = it }
    }

    private fun readPlan(context: Context): PlayPlan {
        val path = "${QnnRuntime.ASSETS}/$PLAN"
        val text = try {
            context.assets.open(path).use { it.readBytes().decodeToString() }
        } catch (e: IOException) {
            throw IllegalStateException("assets/$path is missing: scaffold with --play and apply its Gradle files", e)
        }
        return try {
            PlayPlan.parse(text)
        } catch (e: IllegalArgumentException) {
            throw IllegalStateException("assets/$path is damaged (${e.message}): scaffold --play again", e)
        }
    }

    internal fun manager(context: Context): AiPackManager = AiPackManagerFactory.getInstance(context.applicationContext)

    /**
     * Asks Play for the packs (fast-follow packs come by themselves, on-demand ones only when asked; asking twice
     * is harmless). Progress goes to the listeners; when a pack arrives, the next QnnRuntime.select decides again.
     * Nothing to do for install-time packs: they come with the app.
     */
    fun fetch(context: Context) {
        val plan = plan(context)
        if (plan.delivery == Delivery.INSTALL_TIME) return
        val manager = manager(context)
        listen(manager, plan)
        val names = plan.packs.map { it.name }
        manager.fetch(names).addOnFailureListener { e ->
            Log.w(QnnRuntime.TAG, "fetching AI pack(s) ${names.joinToString()} failed", e)
            listeners.forEach { it.onFetchFailed(e) }
        }
    }

    private fun listen(manager: AiPackManager, plan: PlayPlan) {
        synchronized(lock) {
            if (registered) return
            registered = true
        }
        manager.registerListener(AiPackStateUpdateListener { state -> update(plan, state) })
    }

    private fun update(plan: PlayPlan, state: AiPackState) {
        if (plan.packs.none { it.name == state.name() }) return
        val progress = PackProgress(
            pack = state.name(), status = state.status(), bytesDownloaded = state.bytesDownloaded(),
            totalBytes = state.totalBytesToDownload(), errorCode = state.errorCode(),
        )
        if (progress.completed) QnnRuntime.packArrived() // before the listeners, so that they may reopen models
        listeners.forEach { it.onPackUpdate(progress) }
    }

    /** Where a pack is on this phone now, and which group Play delivered; a pack not (yet) there says why. */
    internal fun locate(context: Context, plan: PlayPlan, pack: PlanPack): PackOnPhone {
        val groupFile = "${pack.folder}/${PlayRules.GROUP_FILE}"
        if (plan.delivery == Delivery.INSTALL_TIME) return inAssets(context, groupFile)
        val location = manager(context).getPackLocation(pack.name)
            ?: return PackOnPhone(null, problem = "not downloaded yet")
        val assets = location.assetsPath() ?: return inAssets(context, groupFile) // a pack installed as an APK
        val dir = File(assets, pack.folder)
        val group = try {
            readGroup(File(dir, PlayRules.GROUP_FILE).readText())
        } catch (e: IOException) {
            null
        } ?: return PackOnPhone(null, problem = "$groupFile is missing or damaged in it")
        return PackOnPhone(group, dir)
    }

    private fun inAssets(context: Context, groupFile: String): PackOnPhone {
        val group = try {
            context.assets.open(groupFile).use { readGroup(it.readBytes().decodeToString()) }
        } catch (e: IOException) {
            null
        } ?: return PackOnPhone(null, problem = "$groupFile is missing or damaged in the app's assets")
        return PackOnPhone(group)
    }

    private fun readGroup(text: String): String? = try {
        (MiniJson.parse(text) as? Map<*, *>)?.get("group") as? String
    } catch (e: IllegalArgumentException) {
        null
    }

    /**
     * A pack's files for the decision's NPU paths (bundle path -> file), when the pack is a folder: Play has already
     * written them to app storage, so they are used where they are. Throws IOException for a file missing or whose
     * size is not the plan's.
     */
    internal fun resolve(pack: PackOnPhone, name: String, group: PlayGroup?, paths: Collection<String>): Map<String, File> {
        val dir = pack.dir ?: return emptyMap()
        val sizes = group?.files.orEmpty().filter { it.pack == name }.associate { it.path to it.size }
        return paths.associateWith { path ->
            val size = sizes[path] ?: throw IOException("$path is not in group ${pack.group} of pack $name in the plan")
            val file = File(dir, path)
            if (!file.isFile) throw IOException("$path is missing from it")
            if (file.length() != size) throw IOException("$path has ${file.length()} bytes, the plan says $size")
            file
        }
    }

    /** The log's "play" object for a phone whose SoC the selector identified as soc. */
    internal fun report(plan: PlayPlan, pack: PackOnPhone, soc: String?): PlayReport {
        val since = Build.VERSION.SDK_INT >= Build.VERSION_CODES.S // Build.SOC_* do not exist before Android 12
        val play = PlayRules.playGroup(
            plan.groups, if (since) Build.SOC_MANUFACTURER else null, if (since) Build.SOC_MODEL else null,
            Build.VERSION.SDK_INT, plan.defaultGroup,
        )
        return PlayReport(plan.pack, plan.delivery.id, pack.group, PlayRules.expectedGroup(plan, soc), play)
    }

    /** The decision's JSON line with the "play" object added. */
    internal fun logLine(decision: Decision, report: PlayReport?): String {
        if (report == null) return decision.toJson()
        @Suppress("UNCHECKED_CAST")
        val json = LinkedHashMap(MiniJson.parse(decision.toJson()) as Map<String, Any?>)
        json["play"] = report.toMap()
        return MiniJson.write(json)
    }

    /** What QnnRuntime.select asks of the pack (Generated.AI_PACK): where its files are, and what it decides. */
    internal object Files : AiPack {
        /**
         * The CPU models and the on-device ones (what a phone without a target compiles) are in the base module's
         * assets, the NPU files of install-time packs in their pack's folder (place read the plan before).
         */
        override fun open(assets: AssetManager, manifest: BundleManifest, path: String): InputStream =
            assets.open(if (inBase(manifest, path)) "${QnnRuntime.ASSETS}/$path" else "${folderOf(path)}/$path")

        private fun folderOf(path: String): String {
            val plan = synchronized(lock) { plan } ?: return PlayRules.FOLDER
            val name = plan.groups.firstNotNullOfOrNull { g -> g.files.firstOrNull { it.path == path }?.pack }
            return plan.packs.firstOrNull { it.name == name }?.folder ?: PlayRules.FOLDER
        }

        private fun inBase(manifest: BundleManifest, path: String): Boolean =
            (manifest.cpu + manifest.onDevice?.artifacts.orEmpty()).any { it.path == path }

        override fun place(context: Context, manifest: BundleManifest, decision: Decision): PackPlacement {
            val plan = plan(context)
            val first = locate(context, plan, plan.packs.first()) // every pack has every group: the report's
            var chosen = decision
            val packFiles = HashMap<String, File>()
            // An on-device decision compiles the base module's ONNX: it needs nothing from the packs.
            if (decision.npu && decision.npuSource != NpuSource.ON_DEVICE) {
                val expected = PlayRules.expectedGroup(plan, decision.soc)
                val group = plan.groups.firstOrNull { it.name == expected }
                // each NPU file's pack (one the group does not list: the first, where resolve says so)
                val packOf = decision.files.filter { path -> !inBase(manifest, path) }.associateWith { path ->
                    group?.files?.firstOrNull { it.path == path }?.pack ?: plan.pack
                }
                val needed = plan.packs.filter { it.name in packOf.values }
                var missing = false
                val reason = needed.firstNotNullOfOrNull { p ->
                    val pack = if (p == plan.packs.first()) first else locate(context, plan, p)
                    when {
                        pack.group == null -> Reasons.packNotReady(
                            pack = p.name, delivery = plan.delivery.id, detail = pack.problem.orEmpty(),
                        ).also { missing = true }
                        pack.group != expected -> Reasons.packGroupMismatch(
                            pack = p.name, delivered = pack.group, soc = decision.soc.orEmpty(), expected = expected,
                        )
                        else -> try {
                            packFiles += resolve(pack, p.name, group, packOf.filterValues { it == p.name }.keys)
                            null
                        } catch (e: IOException) {
                            Reasons.packNotReady(pack = p.name, delivery = plan.delivery.id, detail = e.message.orEmpty())
                        }
                    }
                }
                if (reason != null) {
                    packFiles.clear()
                    val identity = SocIdentity(soc = decision.soc, identifiedBy = decision.identifiedBy)
                    chosen = QnnSelector.cpu(
                        manifest, identity, reason, adsp = decision.adspLibraryPath, runtimeVersion = decision.runtimeVersion,
                    )
                    if (missing) fetch(context) // on-demand: only asked for; fast-follow: harmless
                }
            }
            return PlayPlacement(chosen, packFiles, report(plan, first, chosen.soc))
        }
    }

    /** Forgets the plan and the listeners, as a new process would start: for tests. */
    internal fun forget() = synchronized(lock) {
        plan = null
        registered = false
        listeners.clear()
    }
}

/** The decision log's "play" object of this selection. */
internal val Selection.play: PlayReport? get() = (pack as? PlayPlacement)?.report

/** The NPU files where Play put them, and the pack's report. */
private class PlayPlacement(
    override val decision: Decision,
    override val files: Map<String, File>,
    val report: PlayReport,
) : PackPlacement {
    override fun withoutFiles(decision: Decision): PackPlacement = PlayPlacement(decision, emptyMap(), report)

    override fun logLine(decision: Decision): String = PlayPack.logLine(decision, report)
}
