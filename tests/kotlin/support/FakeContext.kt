package qnndeploy.testsupport

import android.content.Context
import android.content.pm.ApplicationInfo
import android.content.pm.PackageInfo
import android.content.pm.PackageManager
import android.content.res.AssetManager
import java.io.File
import java.io.FileInputStream
import java.io.InputStream

/**
 * An app as Android would give it to the glue: assets from a folder, files in a scratch folder, native libraries in
 * libDir, version 1.0 (1) last updated at `updated`. It records every asset it opens.
 */
class FakeContext(
    private val assetsDir: File,
    private val filesDir: File,
    private val libDir: String,
    private val packageName: String,
    var updated: Long = 1L,
) : Context() {
    val opened = ArrayList<String>()

    override fun getFilesDir(): File = filesDir

    override fun getAssets(): AssetManager = object : AssetManager() {
        override fun open(fileName: String): InputStream {
            opened.add(fileName)
            return FileInputStream(File(assetsDir, fileName))
        }
    }

    override fun getApplicationInfo(): ApplicationInfo = ApplicationInfo().apply { nativeLibraryDir = libDir }

    override fun getPackageManager(): PackageManager = object : PackageManager() {
        @Suppress("OVERRIDE_DEPRECATION")
        override fun getPackageInfo(packageName: String, flags: Int): PackageInfo = PackageInfo().apply {
            versionName = "1.0"
            setLongVersionCode(1)
            lastUpdateTime = updated
        }
    }

    override fun getPackageName(): String = packageName

    override fun getApplicationContext(): Context = this
}
