package android.content.pm;

public class ApplicationInfo {
    public String nativeLibraryDir;
}
